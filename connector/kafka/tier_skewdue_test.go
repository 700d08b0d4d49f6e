package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// A tier copy whose Sluice-Due is far past its tier's delay (written by a
// process whose clock ran 30 days ahead, or forged) is held at most its
// tier's delay from when the source read it: it comes back after 1 s of a
// 1 s tier, and the copy behind it, due now, right after, not 30 days
// later.
func TestTierCopyDueFarAheadIsHeldAtMostItsTiersDelay(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	tier := kafka.TierTopic(topic, time.Second)
	a.topic(tier, 1)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(now)
	cp := func(v string, off int, due time.Time) *kgo.Record {
		r := rec(0, "k", v)
		r.Headers = []kgo.RecordHeader{
			{Key: kafka.HeaderConsumer, Value: []byte(topic + "/" + topic)},
			{Key: kafka.HeaderTopic, Value: []byte(topic)},
			{Key: kafka.HeaderPartition, Value: []byte("0")},
			{Key: kafka.HeaderOffset, Value: []byte{byte('0' + off)}},
			{Key: kafka.HeaderDeliveries, Value: []byte("1")},
			{Key: kafka.HeaderRetries, Value: []byte("1")},
			{Key: kafka.HeaderDue, Value: []byte(due.Format(time.RFC3339Nano))},
		}
		return r
	}
	a.produce(tier, cp("skewed", 0, now.Add(30*24*time.Hour)), cp("due", 1, now))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Second}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	var got []string
	b := pipeline.New("skew", pipeline.WithClock(clock))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		got = append(got, string(m.Value))
		mu.Unlock()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	waitFor(t, "the skewed copy held", func() bool { return kafka.HeldInTiers(src) >= 1 })
	// Up to 20 s of the source's clock, 20 times the tier's delay; then
	// only real time, for the cluster, until the test's bound.
	var advanced time.Duration
	waitWithin(t, 20*time.Second, func() bool {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			return true
		}
		if advanced < 20*time.Second {
			clock.Advance(100 * time.Millisecond)
			advanced += 100 * time.Millisecond
		}
		return false
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("a copy due now, in a 1s tier, still waits behind one due in 30 days: emitted %v after %v of the source's clock", got, advanced)
	})
	mu.Lock()
	g := append([]string(nil), got...)
	mu.Unlock()
	p.Drain()
	require.NoError(t, <-done)
	require.Contains(t, g, "due", "a copy due now, in a 1s tier, still waits behind one due in 30 days")
	assert.Equal(t, []string{"skewed", "due"}, g, "the tier partition's order")
	assert.GreaterOrEqual(t, advanced, time.Second, "the skewed copy waited its tier's delay")
}
