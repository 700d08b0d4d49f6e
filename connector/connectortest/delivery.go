package connectortest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// roundTripMessages returns the messages of the round trip: each with its
// key's bytes as body, but for an empty body, one of every byte value, one
// of 64 KiB and a key beyond ASCII.
func roundTripMessages(n int) []Message {
	msgs := messages(keys(n)...)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	msgs[1].Body = nil
	msgs[2].Body = every
	msgs[3].Body = bytes.Repeat(every, 256)
	msgs[4].Key = "m-ключ-ü-4"
	return msgs
}

// roundTrip publishes 10 000 messages with the connector's publisher and
// consumes them with its source: every confirmed publish is in the queue,
// each message reaches the store exactly once with its key and body
// intact, and the queue is empty afterwards, so every message was acked.
func roundTrip[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 256}
	h.CreateQueue(t, cfg)
	const n = 10_000
	want := roundTripMessages(n)

	pub, err := h.NewPublisher(cfg.Queue)
	require.NoError(t, err, "connectortest: Harness.NewPublisher")
	b := pipeline.New("connectortest-publish")
	pipeline.Sink(b, "publish", pipeline.Source(b, "messages", pipelinetest.NewSliceSource(want...)), pub, pipeline.Parallel(16))
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(ctx)
	require.NoError(t, err, "publishing")
	require.EqualValues(t, n, nodeStats(t, res, "publish").Out)
	requirePending(t, h, cfg.Queue, n, "every publish the publisher's Write returned for is in the queue")

	var (
		mu     sync.Mutex
		bodies = map[string][]byte{}
	)
	s := newSeen()
	c := consumption[M]{h: h, cfg: cfg, store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
		mu.Lock()
		bodies[m.Key] = bytes.Clone(m.Body)
		mu.Unlock()
		if s.add(m.Key) == n {
			p.Drain()
		}
		return nil
	}}
	res, err = c.build(t).Run(ctx)
	require.NoError(t, err, "consuming")
	counts := s.snapshot()
	require.Len(t, counts, n, "every message arrived")
	for _, m := range want {
		assert.Equal(t, 1, counts[m.Key], "message %s arrived once", m.Key)
		if !bytes.Equal(m.Body, bodies[m.Key]) {
			t.Errorf("message %s: body of %d bytes arrived as %d bytes that differ", m.Key, len(m.Body), len(bodies[m.Key]))
		}
	}
	assert.EqualValues(t, n, nodeStats(t, res, "store").Out)
	requirePending(t, h, cfg.Queue, 0, "every message was acked")
}

// acrossADisconnect cuts the source's connection in the middle of a run,
// through a proxy: the source's Run fails transiently, node restart opens
// it again through the proxy, the broker redelivers what was not acked,
// and every message is stored at least once. The messages whose acks were
// lost with the connection (at most a prefetch) come back to a new source
// if the broker still waited for them; then nothing is left.
func acrossADisconnect[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 20}
	h.CreateQueue(t, cfg)
	const n, cutAt = 500, 100
	want := keys(n)
	h.Publish(t, cfg.Queue, messages(want...)...)
	px := NewProxy(t, h.Addr())
	cfg.Addr = px.Addr()

	s := newSeen()
	var written atomic.Int64
	rec := &pipelinetest.Recorder{}
	c := consumption[M]{h: h, cfg: cfg, opts: []pipeline.Option{pipeline.WithObserver(rec)},
		store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
			if written.Add(1) == cutAt {
				px.Cut()
			}
			if s.add(m.Key) == n {
				p.Drain()
			}
			return nil
		}}
	res, err := c.build(t).Run(ctx)
	require.NoError(t, err)
	counts := s.snapshot()
	require.Len(t, counts, n, "no message is lost")
	assert.EqualValues(t, 1, nodeStats(t, res, "consume").NodeRestarts, "one cut, one node restart")
	for _, e := range pipelinetest.Of[observer.RetryEvent](rec) {
		assert.Equal(t, resilience.NodeRestart, e.Kind)
		assert.True(t, resilience.IsTransient(e.Err), "a lost connection is transient: %v", e.Err)
	}
	assert.GreaterOrEqual(t, px.Connections(), 2, "the source reconnected through the proxy")

	// A broker whose acks are not bound to a connection may still wait for
	// those of the messages in flight at the cut, and deliver them again
	// after its ack timeout; nothing else may be left.
	left := h.Pending(t, cfg.Queue)
	require.LessOrEqual(t, left, cfg.Prefetch, "only messages in flight at the cut may be unacked")
	if left > 0 {
		again, _, err := consumeAll(ctx, t, h, cfg, left)
		require.NoError(t, err)
		for k := range again.snapshot() {
			assert.Contains(t, counts, k, "message %s came back", k)
		}
	}
	requirePending(t, h, cfg.Queue, 0, "every message was acked")
}

// competingConsumers runs two sources on one queue, each with a prefetch
// of one. Each holds its first message until both have one, which proves
// both consume; together they store every message exactly once (nothing
// fails, so nothing is delivered twice).
func competingConsumers[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 1}
	h.CreateQueue(t, cfg)
	const n = 2000
	want := keys(n)
	h.Publish(t, cfg.Queue, messages(want...)...)

	all := newSeen()
	both := make(chan struct{})
	var firsts atomic.Int64
	var pipes [2]*pipeline.Pipeline
	var mine [2]*seen
	for i := range pipes {
		mine[i] = newSeen()
		first := true
		pipes[i] = consumption[M]{h: h, cfg: cfg, store: func(ctx context.Context, _ *pipeline.Pipeline, m Message) error {
			mine[i].add(m.Key)
			if first {
				first = false
				if firsts.Add(1) == 2 {
					close(both)
				}
				select {
				case <-both:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if all.add(m.Key) == n {
				pipes[0].Drain()
				pipes[1].Drain()
			}
			return nil
		}}.build(t)
	}
	errs := make(chan error, 2)
	for _, p := range pipes {
		go func() {
			_, err := p.Run(ctx)
			errs <- err
		}()
	}
	for range pipes {
		require.NoError(t, <-errs)
	}
	counts := all.snapshot()
	require.Len(t, counts, n, "together they stored every message")
	for k, c := range counts {
		assert.Equal(t, 1, c, "message %s stored once", k)
	}
	for i, s := range mine {
		assert.NotEmpty(t, s.snapshot(), "consumer %d stored messages", i)
	}
	requirePending(t, h, cfg.Queue, 0, "every message was acked")
}

// drain drains the pipeline while items are in flight in it: Run returns
// nil, every item the pipeline received is stored, once, and acked, and
// what the source had not emitted stays in the queue: stored + left in the
// queue = published.
func drain[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 16}
	h.CreateQueue(t, cfg)
	const n, drainAt = 500, 100
	h.Publish(t, cfg.Queue, messages(keys(n)...)...)

	received, stored := newSeen(), newSeen()
	var writes atomic.Int64
	c := consumption[M]{h: h, cfg: cfg, parallel: 4,
		handle: func(_ context.Context, m Message) error {
			received.add(m.Key)
			return nil
		},
		store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
			stored.add(m.Key)
			if writes.Add(1) == drainAt {
				p.Drain()
			}
			return nil
		}}
	_, err := c.build(t).Run(ctx)
	require.NoError(t, err, "a drained run ends cleanly")
	got, in := stored.snapshot(), received.snapshot()
	for k, c := range got {
		assert.Equal(t, 1, c, "message %s stored once", k)
	}
	for k := range in {
		assert.Contains(t, got, k, "message %s, received before the drain, was finished", k)
	}
	assert.GreaterOrEqual(t, len(got), drainAt)
	assert.Less(t, len(got), n, "the drain stopped the source")
	requirePending(t, h, cfg.Queue, n-len(got), "stored and acked, or back in the queue: nothing lost, nothing left unacked")
}

var (
	errStop = errors.New("connectortest: stop")
	errHeld = errors.New("connectortest: held for an hour")
)

// giveBackBound is how soon the messages of a cancelled run must reach a
// new source: they are given back at once, so this leaves room for a busy
// machine only. It is well below the ack wait of a NATS harness (5 s), so
// that a connector that lets the ack wait run out, or hands them to a
// delayed redelivery, fails.
const giveBackBound = 3 * time.Second

var errNotBack = errors.New("connectortest: the messages of the cancelled run were not back in time")

// cancelPutsBack cancels the run's context while the store holds a
// message: Run returns the cancellation, the messages stored before are
// acked, every other is back in the queue, and a new source gets exactly
// those, promptly: within giveBackBound, not after an ack wait or a
// redelivery delay.
func cancelPutsBack[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 100}
	h.CreateQueue(t, cfg)
	const n, done = 200, 50
	want := keys(n)
	h.Publish(t, cfg.Queue, messages(want...)...)

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stored := newSeen()
	var writes int
	c := consumption[M]{h: h, cfg: cfg, store: func(ctx context.Context, _ *pipeline.Pipeline, m Message) error {
		if writes == done {
			cancel(errStop)
			<-ctx.Done()
			return context.Cause(ctx)
		}
		writes++
		stored.add(m.Key)
		return nil
	}}
	_, err := c.build(t).Run(runCtx)
	require.ErrorIs(t, err, errStop, "the run ends with its cancellation")
	first := stored.snapshot()
	require.Len(t, first, done)
	requirePending(t, h, cfg.Queue, n-done, "what was not stored is back in the queue")

	var rest []string
	for _, k := range want {
		if first[k] == 0 {
			rest = append(rest, k)
		}
	}
	// Pending counts messages delivered and not acked too (NATS): only a
	// new source getting them shows that they are ready again.
	backCtx, stop := context.WithTimeoutCause(ctx, giveBackBound, errNotBack)
	second, _, err := consumeAll(backCtx, t, h, cfg, len(rest))
	stop()
	require.NoError(t, err, "a new source gets the messages not stored within %s", giveBackBound)
	again := second.snapshot()
	assert.Len(t, again, len(rest), "a new source gets exactly the messages not stored")
	for _, k := range rest {
		assert.Equal(t, 1, again[k], "message %s", k)
	}
	requirePending(t, h, cfg.Queue, 0, "every message was acked")
}

// outOfOrder settles a run's messages out of their order: under
// Parallel and Unordered, the first message fails and waits an hour for
// its retry (parked: it holds no worker, nor the items dealt with it in
// one chunk), every later one is stored, and the run is cancelled then. The first was
// never stored, so settling the others must not settle it (a connector
// that acks "every message up to this one", as RabbitMQ's multiple flag
// does, loses it): the broker still holds it, and a new source gets it
// within giveBackBound. A broker of positions (Kafka) may deliver the
// stored messages after it again too, which the case allows.
func outOfOrder[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 64}
	h.CreateQueue(t, cfg)
	const n = 40
	want := keys(n)
	h.Publish(t, cfg.Queue, messages(want...)...)
	held := want[0]

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stored := newSeen()
	c := consumption[M]{h: h, cfg: cfg, parallel: 4, unordered: true,
		opts: []pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.Constant(time.Hour) // cancelled first
		})},
		handle: func(ctx context.Context, m Message) error {
			if m.Key == held {
				return resilience.MarkTransient(errHeld) // settles last, after every other
			}
			return nil
		},
		store: func(_ context.Context, _ *pipeline.Pipeline, m Message) error {
			if stored.add(m.Key) == n-1 {
				cancel(errStop)
			}
			return nil
		}}
	_, err := c.build(t).Run(runCtx)
	require.ErrorIs(t, err, errStop, "the run ends with its cancellation")
	first := stored.snapshot()
	require.Len(t, first, n-1, "every message but the held one was stored")
	require.NotContains(t, first, held)
	for k, c := range first {
		assert.Equal(t, 1, c, "message %s stored once", k)
	}
	require.GreaterOrEqual(t, h.Pending(t, cfg.Queue), 1, "the held message, never stored, is still in the queue")

	backCtx, stop := context.WithTimeoutCause(ctx, giveBackBound, errNotBack)
	defer stop()
	again := newSeen()
	c = consumption[M]{h: h, cfg: cfg, store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
		again.add(m.Key)
		if m.Key == held {
			p.Drain()
		}
		return nil
	}}
	_, err = c.build(t).Run(backCtx)
	require.NoError(t, err, "a new source gets the held message within %s", giveBackBound)
	assert.Equal(t, 1, again.snapshot()[held], "the held message, delivered again")
}

// nodeStats returns the run's counts of the node called name, failing the
// case when the run has no such node.
func nodeStats(t testing.TB, res pipeline.Result, name string) pipeline.NodeStats {
	t.Helper()
	n, ok := res.Node(name)
	require.True(t, ok, "the run has a node %q", name)
	return n
}
