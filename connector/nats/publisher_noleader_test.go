package nats_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A publish that no stream answers may meet a stream between leaders,
// which answers as a subject no stream stores does: the item's retry
// tries it again, and once the stream answers (here, made between the
// attempts), the item is published, where a permanent error would have
// failed the run on the first attempt.
func TestPublishNoStreamYetIsRetried(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	a.cleanup(name)
	ctx := testContext(t)
	clock := clockwork.NewFakeClock()
	pub, err := nats.NewPublisher(nats.PublisherConfig[order]{URL: a.url, Subject: name + ".in", Message: orderMessage})
	require.NoError(t, err)
	b := pipeline.New("no-leader", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
		o.OnItemFailure = resilience.Fail
	}))
	pipeline.Sink(b, "publish", pipeline.Source(b, "orders", pipelinetest.NewTrackedSource(order{ID: "1"})), pub)
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(ctx, p)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the first attempt failed, and its retry waits")
	a.stream(name) // the stream answers now
	clock.Advance(time.Second)
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), a.messages(name))
	st, ok := res.Node("publish")
	require.True(t, ok)
	assert.Equal(t, int64(1), st.ItemRetries)
}
