package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A hand-off copy due an hour from now is held in the gate when the run
// is stopped (Stop, then Drain): the run ends at once, the original is
// committed, the copy is not; a second run (same group) with the clock
// past due reads and stores the copy.
func TestTierCopyDueLaterOutlivesTheRun(t *testing.T) {
	for _, how := range []string{"stop", "drain", "cancel"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			c := sharedCluster(t, 1)
			a := newAdmin(t, c)
			topic := uniqueName(t)
			a.topic(topic, 1)
			a.produce(topic, rec(0, "k", "flaky"), rec(0, "k2", "fine"))
			clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := a.config(topic)
			cfg.Clock = clock
			cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{time.Hour},
				HandOffAfter: time.Second}
			var failedOnce atomic.Bool
			mk := func() (*kafka.Source, *pipeline.Pipeline, *atomic.Int64, *atomic.Int64) {
				src, err := kafka.NewSource(cfg)
				require.NoError(t, err)
				var flaky, fine atomic.Int64
				b := pipeline.New("tierdrain", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Constant(time.Hour)
				}))
				pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
					if string(m.Value) == "flaky" {
						flaky.Add(1)
						if failedOnce.CompareAndSwap(false, true) {
							return resilience.MarkTransient(errFlaky)
						}
						return nil
					}
					fine.Add(1)
					return nil
				})
				p, err := b.Build()
				require.NoError(t, err)
				return src, p, &flaky, &fine
			}
			src, p, flaky, fine := mk()
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			done := runAsync(t, p, ctx)
			tier := kafka.TierTopic(topic, time.Hour)
			waitFor(t, "the copy held until due", func() bool { return kafka.HeldInTiers(src) == 1 })
			waitFor(t, "fine stored", func() bool { return fine.Load() == 1 })
			switch how {
			case "stop":
				src.Stop()
			case "drain":
				p.Drain()
			case "cancel":
				cancel()
			}
			select {
			case err := <-done:
				if how != "cancel" {
					require.NoError(t, err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("run did not end with a tier record held")
			}
			assert.Equal(t, int64(1), flaky.Load())
			assert.Zero(t, a.lag(topic, topic), "the original is committed")
			assert.Equal(t, int64(1), a.lag(topic, tier), "the held copy is not")

			clock.Advance(2 * time.Hour)
			src2, p2, flaky2, _ := mk()
			_ = src2
			done2 := runAsync(t, p2, testContext(t))
			waitFor(t, "the copy stored by the second run", func() bool { return flaky2.Load() == 1 })
			waitFor(t, "committed", func() bool {
				clock.Advance(time.Second)
				return a.lag(topic, tier) == 0
			})
			p2.Drain()
			require.NoError(t, <-done2)
		})
	}
}
