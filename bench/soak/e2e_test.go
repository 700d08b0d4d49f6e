package main

import (
	"context"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// TestMain runs the soak's child processes when the test binary is
// started as one (the Kafka test's child consumer), and the tests with a
// leak check otherwise.
func TestMain(m *testing.M) {
	if childMain(os.Args[1:]) {
		return
	}
	goleak.VerifyTestMain(m)
}

// testContext bounds a test's waits: each waits on events, and this only
// turns a hang into a failure.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// calm is the flaky dependency with its poison items alone, so that no
// retry waits on the real clock.
func calm(seed uint64) *flaky {
	f := newFlaky(seed)
	f.transient, f.asksLater = 0, 0
	return f
}

func TestETLCycleBooks(t *testing.T) {
	for _, c := range []struct {
		name                 string
		rows, malformedEvery int
		wantDead             int
	}{
		{"one row", 1, 50, 0},
		{"one malformed row", 1, 1, 1},
		{"fewer than a batch", 49, 50, 0},
		{"exactly a batch", 50, 50, 1},
		{"several batches", 1234, 50, 24},
		{"all malformed", 20, 1, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for cycle := range 2 { // the same directory again: a second cycle starts clean
				a, err := etlCycle(testContext(t), dir, cycle, c.rows, c.malformedEvery, calm(1))
				require.NoError(t, err)
				assert.Empty(t, a.problems())
				assert.Equal(t, account{pipeline: "etl", in: c.rows, out: c.rows - c.wantDead, dead: c.wantDead}, a)
			}
		})
	}
}

// Transient failures and RetryAfter cost no row: each is retried (at
// once: no wait on the real clock) until it passes.
func TestETLCycleTransientFailuresCostNothing(t *testing.T) {
	f := newFlaky(3)
	f.retryAfter, f.backoff = 0, 0
	f.transient, f.asksLater = 0.2, 0.2
	a, err := etlCycle(testContext(t), t.TempDir(), 0, 500, 50, f)
	require.NoError(t, err)
	assert.Empty(t, a.problems())
	assert.Equal(t, 490, a.out)
	assert.Equal(t, 10, a.dead)
}

// The broker pipeline end to end, its length in items: 2,000 items on
// kfake, consumed by this process and a child consumer in one group,
// through the proxy; at a quarter of the items every connection is cut,
// at half the child is SIGKILLed and started again, at three quarters a
// latency toxic runs to the end. Every item is delivered or
// dead-lettered, the poison ones dead-lettered, and the duplicates that
// the kill and the cut cost are counted.
func TestKafkaPipelineUnderFaults(t *testing.T) {
	const n, topic, group = 2000, "soak-test", "soak-test"
	ctx := testContext(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	addr := cluster.ListenAddrs()[0]
	require.NoError(t, createTopic(ctx, addr, topic, 4))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := []byte(strconv.Itoa(i))
		recs[i] = &kgo.Record{Key: v, Value: v}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	cl.Close()

	proxy := connectortest.NewProxy(t, addr)

	const seed = 5
	fl := calm(seed)
	bk := &books{poison: fl.poison}
	var (
		mu    sync.Mutex
		steps = map[int]bool{}
	)
	reached := make(chan int, 8)
	progress := func() {
		d := bk.done()
		mu.Lock()
		defer mu.Unlock()
		for _, q := range []int{n / 4, n / 2, 3 * n / 4, n} {
			if d >= q && !steps[q] {
				steps[q] = true
				reached <- q
			}
		}
	}
	deliver := func(id int) { bk.deliver(id); progress() }
	dead := func(id int) { bk.deadLetter(id); progress() }

	startConsumer := func() *child {
		c, err := startChild("-consumer", "-via", proxy.Addr(), "-topic", topic, "-group", group, "-seed", strconv.Itoa(seed))
		require.NoError(t, err)
		go func() { c.done <- c.cmd.Wait() }()
		return c
	}
	kid := startConsumer()
	kidRead := kid.feed(deliver, dead)

	src, p, err := consumer(proxy.Addr(), topic, group, fl, deliver, dead)
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { _, err := p.Run(context.WithoutCancel(ctx)); ran <- err }()

	var kills int
	for done := false; !done; {
		select {
		case q := <-reached:
			switch q {
			case n / 4:
				proxy.Cut()
			case n / 2:
				require.NoError(t, kid.cmd.Process.Signal(syscall.SIGKILL))
				<-kid.done
				<-kidRead
				kills++
				kid = startConsumer()
				kidRead = kid.feed(deliver, dead)
			case 3 * n / 4:
				injectFault(proxy, faultLatency)
			case n:
				done = true
			}
		case err := <-ran:
			t.Fatalf("the consumer's pipeline ended before every item: %v", err)
		case <-ctx.Done():
			t.Fatalf("%d of %d items after %s", bk.done(), n, "the test's bound")
		}
	}
	proxy.Clear()
	kid.stop(time.Minute)
	<-kidRead
	src.Stop()
	require.NoError(t, <-ran)

	a := bk.account("kafka", n, true)
	a.allowed = allowance(3, 2, consumerWindow, consumerRestarts) // a cut, a kill and latency, as run counts them
	assert.Empty(t, a.problems())
	wantDead := 0
	for id := range n {
		if fl.poison(id) {
			wantDead++
		}
	}
	assert.NotZero(t, wantDead, "the seed makes poison items")
	assert.Equal(t, wantDead, a.dead, "every poison item dead-lettered, no other")
	assert.Zero(t, a.wrongDead, "by id")
	assert.Equal(t, n-wantDead, a.out)
	assert.Equal(t, 1, kills)
	t.Logf("%d duplicates from a cut and a kill", a.duplicates)
}
