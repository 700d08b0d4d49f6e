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

// An item parked on a Parallel node (its wait, 30m, shorter than
// HandOffAfter) is handed back by a drain for the rest of its wait: the
// rest is within the longest tier (HandOffAfter is at most that tier's
// delay), so HandOff takes it; the tier holds its copy, and the original
// is committed without another call.
func TestDrainHandsAParkedItemBackToItsTier(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "k", "flaky"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.DrainTimeout = time.Hour
	cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{time.Hour}, HandOffAfter: time.Hour}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var calls atomic.Int64
	b := pipeline.New("drain-hand-back", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(30 * time.Minute)
	}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		calls.Add(1)
		return resilience.MarkTransient(errFlaky)
	}, pipeline.Parallel(2))
	p, err := b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	waitFor(t, "called", func() bool { return calls.Load() == 1 })
	// Parked or about to park: either way the drain hands it back (a
	// parking looks at the drain first).
	p.Drain()
	waitWithin(t, 15*time.Second, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	}, func() string { return "the drain did not hand back the parked item" })
	require.NoError(t, err)
	tier := kafka.TierTopic(topic, time.Hour)
	assert.Equal(t, int64(1), tierRecords(t, c, tier))
	assert.Zero(t, a.lag(topic, topic))
	assert.Equal(t, int64(1), calls.Load())
}
