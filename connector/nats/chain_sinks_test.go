package nats_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// alwaysRetrier stands for a second broker source's dead-letter sink (a
// NATS source's, say): it gives every item back to its broker.
type alwaysRetrier struct{ retries atomic.Int64 }

func (r *alwaysRetrier) Write(ctx context.Context, env deadletter.Envelope) error {
	_, err := r.WriteOrRetry(ctx, env)
	return err
}

func (r *alwaysRetrier) WriteOrRetry(context.Context, deadletter.Envelope) (bool, error) {
	r.retries.Add(1)
	return true, nil
}

// Two broker sources in one pipeline chain their sinks, as "Every other
// envelope goes to next unchanged" suggests: A.DeadLetter(B.DeadLetter(file)).
// When B gives an item back to its broker, A's sink passes B's "retried" on:
// the item counts as a broker retry, not as a dead letter.
func TestChainedBrokerSinkCountsNextsBrokerRetries(t *testing.T) {
	src, err := nats.NewSource(nats.SourceConfig{URL: "nats://127.0.0.1:4222", Stream: "chain-sinks", Consumer: "c"})
	require.NoError(t, err)
	next := &alwaysRetrier{}
	b := pipeline.New("chain", pipeline.WithDeadLetter(src.DeadLetter(next)))
	in := pipeline.Source[int](b, "other-broker", pipelinetest.NewSliceSource(1, 2, 3))
	out := pipeline.Map(b, "handle", in, func(context.Context, int) (int, error) {
		return 0, resilience.MarkPermanent(errors.New("bad"))
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	pipeline.Sink(b, "store", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	n, _ := res.Node("handle")
	t.Logf("next gave %d back to its broker; Result: dead-lettered %d, broker retries %d", next.retries.Load(), n.DeadLettered, n.BrokerRetries)
	assert.Equal(t, next.retries.Load(), n.BrokerRetries)
	assert.Zero(t, n.DeadLettered, "nothing was stored")
}
