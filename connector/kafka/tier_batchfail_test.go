package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A batch of a and b fails transiently; a's tier copy is stored, b's is
// refused every time, so the write's retries fail and the run fails. a's
// copy stands in for it: a is settled and committed whatever the batch's
// outcome, so it is delivered once more (by its copy), not twice; b,
// copied nowhere, is not committed. With the poison guard on, nothing of
// a or b is copied into the topic either (a third delivery of a).
func TestBatchRunFailsAfterARecordsCopyCommitsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		maxDeliveries int
	}{{"plain", 0}, {"poison guard", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1)
			a := newAdmin(t, c)
			topic := uniqueName(t)
			a.topic(topic, 2)
			tier := kafka.TierTopic(topic, time.Hour)
			a.topic(tier, 2)
			a.produce(topic, rec(0, "a", "a"), rec(1, "b", "b"))
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				pr := req.(*kmsg.ProduceRequest)
				for _, rt := range pr.Topics {
					for _, rp := range rt.Partitions {
						if rp.Partition == 1 {
							return refusal(pr, kerr.InvalidRecord.Code), nil, true
						}
					}
				}
				return nil, nil, false
			})
			clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := a.config(topic)
			cfg.Clock = clock
			cfg.MaxDeliveries = tc.maxDeliveries
			cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}
			src, err := kafka.NewSource(cfg)
			require.NoError(t, err)
			var calls atomic.Int64
			b := pipeline.New("batchfail", pipeline.WithClock(clock), pipeline.WithDeadLetter(src.DeadLetter(deadletter.NewMemory(10))),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.OnItemFailure = resilience.DeadLetter
				}))
			bs := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, time.Minute)
			pipeline.ForEach(b, "store", bs, func(_ context.Context, ms []kafka.Message) error {
				calls.Add(1)
				return resilience.MarkTransient(errFlaky)
			})
			p, err := b.Build()
			require.NoError(t, err)
			done := runAsync(t, p, testContext(t))
			waitFor(t, "the first batch", func() bool { return calls.Load() >= 1 })
			// The write's retries back off on the pipeline's clock.
			var rerr error
			waitWithin(t, 30*time.Second, func() bool {
				select {
				case rerr = <-done:
					return true
				default:
				}
				clock.Advance(500 * time.Millisecond)
				return false
			}, func() string { return "the run did not fail" })
			require.Error(t, rerr, "b's copy is refused every time")
			t.Logf("run: %v", rerr)
			assert.Equal(t, int64(1), tierRecords(t, c, tier), "a's copy alone is stored")
			com := a.committed(topic, topic)
			assert.Equal(t, int64(1), com[0], "a, whose copy stands in for it, is committed")
			assert.Less(t, com[1], int64(1), "b, copied nowhere, is not committed")
			assert.Equal(t, int64(2), tierRecords(t, c, topic), "no copy of a or b in the topic")
		})
	}
}
