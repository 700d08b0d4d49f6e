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

// Source.Redelivered counts the records emitted again whose earlier
// items did not settle. A hand-off settles its item (HandedOff): the copy
// that comes back from the tier, with Deliveries 2, is not counted, and
// the counter stays 0 for a run in which every item settled.
func TestRedeliveredSkipsHandOffs(t *testing.T) {
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "k", "flaky"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{10 * time.Second},
		HandOffAfter: time.Second}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	var seen calls
	var p *pipeline.Pipeline
	b := pipeline.New("handoff-redelivered", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(5 * time.Second)
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
	tier := kafka.TierTopic(topic, 10*time.Second)
	waitFor(t, "the hand-off's copy in the tier", func() bool { return tierRecords(t, c, tier) == 1 })
	waitFor(t, "the copy held until due", func() bool { return kafka.HeldInTiers(src) == 1 })
	clock.Advance(5 * time.Second)
	require.NoError(t, <-done)
	_, nth := seen.of("flaky")
	require.Equal(t, []int{1, 2}, nth, "the original, then its copy")
	assert.Zero(t, a.lag(topic, topic), "the original settled (handed off) and was committed")
	assert.Zero(t, src.Redelivered(), "no record's item went unsettled")
}
