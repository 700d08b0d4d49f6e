package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSample runs the sample's main path on a cluster in the process, as
// the command does without -brokers: every order is priced once, in its
// customer's order, the flaky ones after a retry, and each result is in
// the results topic.
func TestSample(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := config{brokers: cluster.ListenAddrs(), orders: "orders", results: "results", n: 200, customers: 7,
		partitions: 3, flaky: 10}
	require.NoError(t, cfg.validate())
	s, err := run(ctx, cfg, false)
	require.NoError(t, err)
	var out bytes.Buffer
	s.print(&out)
	assert.Equal(t, 200, s.published)
	assert.Equal(t, 200, s.consumed)
	assert.Equal(t, 20, s.retried, "every 10th order failed once")
	assert.Equal(t, 200, s.results)
	assert.Zero(t, s.outOfOrder)
	assert.Contains(t, out.String(), "results       200 published")

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("results"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	seen := map[string]bool{}
	for len(seen) < 200 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		for _, r := range fs.Records() {
			id := strings.SplitN(string(r.Value), ",", 2)[0]
			assert.False(t, seen[id], "result of order %s once", id)
			seen[id] = true
		}
	}
}

func TestFlags(t *testing.T) {
	ok := config{n: 1, customers: 1, partitions: 1, orders: "a", results: "b"}
	assert.NoError(t, ok.validate())
	for name, bad := range map[string]func(*config){
		"n":          func(c *config) { c.n = 0 },
		"customers":  func(c *config) { c.customers = 0 },
		"partitions": func(c *config) { c.partitions = 0 },
		"flaky":      func(c *config) { c.flaky = -1 },
		"topics":     func(c *config) { c.results = c.orders },
	} {
		c := ok
		bad(&c)
		assert.ErrorIs(t, c.validate(), errConfig, name)
	}
	o, err := decode(encode(order{ID: 3, Customer: "c1", Amount: 4}))
	require.NoError(t, err)
	assert.Equal(t, order{ID: 3, Customer: "c1", Amount: 4}, o)
	_, err = decode([]byte("nope"))
	assert.Error(t, err)
}

// The flaky orders are spread over the customers, whatever -flaky and
// -customers are: the pricing is Keyed by the customer, so a customer's
// orders are priced one at a time and each flaky one holds the rest of
// its customer's orders for its -backoff. When every flaky order was one
// customer's (-flaky 20 with 20 customers: order ids 19, 39, ... are all
// c19's), that customer's orders queued up behind one another, and a
// Ctrl-C drain waited out one backoff per queued order in turn: up to 256
// of them (the source's MaxInFlight), 13 s at 50 ms.
func TestFlakyOrdersSpreadOverCustomers(t *testing.T) {
	for _, c := range []struct{ customers, flaky int }{{20, 20}, {20, 10}, {20, 5}, {10, 20}, {7, 10}, {3, 3}, {1, 10}} {
		const n = 20000
		perCustomer := make([]int, c.customers)
		total := 0
		for id := range n {
			if flakyOrder(id, c.customers, c.flaky) {
				perCustomer[id%c.customers]++
				total++
			}
		}
		assert.InDelta(t, n/c.flaky, total, float64(c.customers), "%+v: one order in %d", c, c.flaky)
		share := n / c.flaky / c.customers
		for cust, got := range perCustomer {
			assert.InDelta(t, share, got, 1, "%+v: customer %d's flaky orders", c, cust)
		}
	}
}
