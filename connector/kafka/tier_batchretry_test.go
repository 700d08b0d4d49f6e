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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A batch's broker retry copies its records one by one; the second
// record's copy is refused once, so the write fails after the first's copy
// was acked, and the engine retries the write. The retried write copies
// only the second record: the first is in its tier once, and is stored
// once when the copies come back.
func TestBatchBrokerRetryDoesNotCopyAStoredRecordAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 2)
	tier := kafka.TierTopic(topic, time.Hour)
	a.topic(tier, 2)
	a.produce(topic, rec(0, "a", "a"), rec(1, "b", "b"))
	var refused atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		for _, rt := range pr.Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition == 1 && refused.CompareAndSwap(false, true) {
					return refusal(pr, kerr.InvalidRecord.Code), nil, true
				}
			}
		}
		return nil, nil, false
	})
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var calls, first, storedA atomic.Int64
	var written atomic.Bool
	b := pipeline.New("batchdup", pipeline.WithClock(clock), pipeline.WithDeadLetter(deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		err := src.DeadLetter(deadletter.NewMemory(10)).Write(ctx, env)
		t.Logf("dead-letter write of %T at %v: %v", env.Item, clock.Now(), err)
		if err == nil {
			written.Store(true)
		}
		return err
	})),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.DeadLetter
		}))
	bs := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, time.Minute)
	pipeline.ForEach(b, "store", bs, func(_ context.Context, ms []kafka.Message) error {
		calls.Add(1)
		if calls.Load() == 1 {
			first.Store(int64(len(ms)))
		}
		for _, m := range ms {
			t.Logf("call: %s/%d/%d %q deliveries %d at %v", m.Topic, m.Partition, m.Offset, m.Value, m.Deliveries, clock.Now())
		}
		if ms[0].Deliveries == 1 {
			return resilience.MarkTransient(errFlaky)
		}
		for _, m := range ms {
			if string(m.Value) == "a" {
				storedA.Add(1)
			}
		}
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	// Nothing moves the clock before the first batch is handed over: it
	// is full, both records.
	waitFor(t, "the first batch", func() bool { return calls.Load() >= 1 })
	// The engine's retry of the write waits on the pipeline's fake clock.
	waitWithin(t, 20*time.Second, func() bool {
		if written.Load() {
			return true
		}
		clock.Advance(200 * time.Millisecond)
		return false
	}, func() string { return "the batch's broker retry was never written" })
	require.Equal(t, int64(2), first.Load(), "the first batch holds both records")
	require.True(t, refused.Load(), "the second record's first copy was refused")
	// The copies come back an hour later. Every copy in the tier is read
	// and settled once the group's tier commit reaches the tier's end.
	clock.Advance(time.Hour)
	waitWithin(t, 20*time.Second, func() bool {
		if storedA.Load() < 1 {
			clock.Advance(time.Second)
			return false
		}
		var end, read int64
		for _, o := range a.committed(topic, tier) {
			read += o
		}
		end = tierRecords(t, c, tier)
		if read < end {
			clock.Advance(time.Second)
			return false
		}
		top := a.committed(topic, topic)
		return top[0] == 1 && top[1] == 1
	}, func() string {
		return fmt.Sprintf("the tier's copies were not all read: committed topic %v tier %v, tier records %d, a stored %d",
			a.committed(topic, topic), a.committed(topic, tier), tierRecords(t, c, tier), storedA.Load())
	})
	p.Drain()
	require.NoError(t, waitRun(t, done))
	t.Logf("calls %d, tier records %d", calls.Load(), tierRecords(t, c, tier))
	assert.Equal(t, int64(2), tierRecords(t, c, tier), "one tier copy per record of the batch")
	assert.Equal(t, int64(1), storedA.Load(), "record a stored more than once: its acked tier copy was made again by the write's retry")
}
