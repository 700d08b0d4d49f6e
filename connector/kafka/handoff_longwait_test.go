package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A wait longer than every tier is not handed off: the source holds a tier
// copy at most its tier's delay from when it reads it, so the longest tier
// would bring the item back early (and its retries would go at the tier's
// rate). HandOff fails, and the node waits the hour in process: the next
// call comes an hour later, with the same delivery, and no copy is made.
func TestHandOffLongerThanEveryTierWaitsInProcess(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "k", "flaky"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{time.Second}, HandOffAfter: time.Second}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	var seen calls
	var p *pipeline.Pipeline
	b := pipeline.New("handoff-long", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(time.Hour)
	}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		if seen.add(string(m.Value), clock.Now(), m.Deliveries) == 1 {
			return resilience.MarkTransient(errFlaky)
		}
		p.Drain()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	waitFor(t, "the first call", func() bool { at, _ := seen.of("flaky"); return len(at) == 1 })
	// Move the clock on a minute at a time until the second call comes:
	// from the 1s tier it would come within a minute or two; waited in
	// process, an hour after the first.
	waitFor(t, "the second call", func() bool {
		clock.Advance(time.Minute)
		at, _ := seen.of("flaky")
		return len(at) == 2
	})
	require.NoError(t, <-done)
	at, nth := seen.of("flaky")
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), time.Hour, "the hour's wait was cut short")
	assert.Equal(t, []int{1, 1}, nth, "the same delivery, retried in process, not a tier's copy")
	assert.Zero(t, tierRecords(t, c, kafka.TierTopic(topic, time.Second)), "a wait no tier covers is not copied")
	assert.Zero(t, a.lag(topic, topic), "settled by the call that stored it")
}
