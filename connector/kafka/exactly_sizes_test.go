package kafka_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
)

// Exactly-once with 1, MaxInFlight, MaxInFlight+1 records, ended by Stop
// or Drain before any epoch's time is up (the clock stands still): Close
// commits the one epoch; each output once; inputs committed.
func TestExactlyOnceSizes(t *testing.T) {
	for _, n := range []int{1, 32, 33} {
		for _, end := range []string{"stop", "drain"} {
			t.Run(fmt.Sprintf("n%d-%s", n, end), func(t *testing.T) {
				t.Parallel()
				c := shared(t)
				addrs := c.ListenAddrs()
				in, out := pubName(t), pubName(t)
				createTopicOn(t, c, in, 1)
				createTopicOn(t, c, out, 1)
				fillInput(t, addrs, in, n)
				clock := clockwork.NewFakeClock()
				eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
				var passed atomic.Int64
				pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { passed.Add(1); return m, nil }
				p := eoPipeline(t, eo, clock, pass)
				res := make(chan error, 1)
				go func() { _, err := p.Run(pubContext(t)); res <- err }()
				waitFor(t, "all passed", func() bool { return passed.Load() == int64(n) })
				waitFor(t, "outputs produced", func() bool { return countTopic(t, addrs, out) >= int64(n) })
				if end == "stop" {
					eo.Source().Stop()
				} else {
					p.Drain()
				}
				select {
				case err := <-res:
					require.NoError(t, err)
				case <-time.After(20 * time.Second):
					t.Fatal("run did not end")
				}
				checkOnce(t, readCommitted(t, addrs, out, n), n)
				a := newAdmin(t, c)
				assert.Zero(t, lagOf(t, a, in, in))
				assert.Equal(t, int64(1), eo.Source().Commits())
			})
		}
	}
}
