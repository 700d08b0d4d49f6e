package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// retrier is a dead-letter sink that gives the items of which retry says
// so back to their broker, and stores the others.
type retrier struct {
	mu     sync.Mutex
	retry  func(item any) bool
	stored []deadletter.Envelope
	sent   int
}

func (r *retrier) Write(ctx context.Context, env deadletter.Envelope) error {
	_, err := r.WriteOrRetry(ctx, env)
	return err
}

func (r *retrier) WriteOrRetry(_ context.Context, env deadletter.Envelope) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retry(env.Item) {
		r.sent++
		return true, nil
	}
	r.stored = append(r.stored, env)
	return false, nil
}

var _ deadletter.BrokerRetrier = (*retrier)(nil)

// Items that the dead-letter sink gives back to their broker are broker
// retries, not dead letters: DeadLettered is what the sink stored, in
// Stats, in the Result and its table, in the graph, and in the events;
// and they are no longer in flight.
func TestBrokerRetriesAreNotDeadLetters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		items         []int
		retried, dead int64
	}{
		{"none", nil, 0, 0},
		{"one retried", []int{1}, 1, 0},
		{"one stored", []int{2}, 0, 1},
		{"mixed", []int{1, 2, 3, 4, 5, 6, 7}, 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			rec := &pipelinetest.Recorder{}
			sink := &retrier{retry: func(item any) bool { return item.(int)%2 == 1 }}
			b := pipeline.New("broker-retries", pipeline.WithClock(clock), pipeline.WithObserver(rec), pipeline.WithDeadLetter(sink),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.OnItemFailure = resilience.DeadLetter
				}))
			src := pipelinetest.NewTrackedSource(tc.items...)
			out := pipeline.Transform(b, "call", pipeline.Source(b, "src", src), pipelinetest.FailAlways(errors.New("down"), tc.items...))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			p := build(t, b)
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Millisecond)
			require.NoError(t, err)

			call := nodeOf(t, res, "call")
			assert.Equal(t, tc.dead, call.DeadLettered, "what the sink stored")
			assert.Equal(t, tc.retried, call.BrokerRetries)
			assert.Equal(t, tc.dead+tc.retried, call.Failed)
			assert.Len(t, sink.stored, int(tc.dead))
			assert.Equal(t, int(tc.retried), sink.sent)
			st, ok := p.Stats().Node("call")
			require.True(t, ok)
			assert.Equal(t, tc.retried, st.BrokerRetries)
			assert.Equal(t, tc.dead, st.DeadLettered)

			table := res.String()
			if tc.retried > 0 {
				assert.Contains(t, table, "broker retries")
			} else {
				assert.NotContains(t, table, "broker retries", "the column is there only when a node counted some")
			}
			var brokerEvents, deadEvents int64
			for _, e := range pipelinetest.Of[observer.DeadLetterEvent](rec) {
				if e.BrokerRetry {
					brokerEvents++
				} else {
					deadEvents++
				}
			}
			assert.Equal(t, tc.retried, brokerEvents)
			assert.Equal(t, tc.dead, deadEvents)

			g := p.Graph().WithStats(p.Stats()).Mermaid()
			if tc.retried > 0 {
				assert.Contains(t, g, "broker retries")
			}
		})
	}
}

// An item given back to its broker is no longer in flight at its node.
func TestBrokerRetryLeavesTheNode(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClock()
		sink := &retrier{retry: func(any) bool { return true }}
		b := pipeline.New("broker-retries", pipeline.WithClock(clock), pipeline.WithDeadLetter(sink),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
			}))
		release := make(chan struct{})
		src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
			if err := out.Emit(ctx, 1); err != nil {
				return err
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		out := pipeline.Transform(b, "call", pipeline.Source(b, "src", src), pipelinetest.FailAlways(errors.New("down"), 1))
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		var st pipeline.NodeStats
		for {
			st, _ = p.Stats().Node("call")
			if st.In == 1 && st.BrokerRetries == 1 {
				break
			}
			runtimeGosched()
		}
		assert.Zero(t, st.InFlight, "the item went back to its broker")
		close(release)
		_, err := run.Wait()
		require.NoError(t, err)
	}
}

// poisoner is a source that writes its first item to the dead-letter sink
// itself, as a broker source does with a poison message, and emits the
// others.
type poisoner struct {
	sink deadletter.Sink
	base deadletter.Envelope
}

func (s *poisoner) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	s.sink, s.base = sink, base
}

func (s *poisoner) Run(ctx context.Context, out node.Emitter[int]) error {
	env := s.base
	env.Item, env.Err, env.CorrelationID, env.Attempts = 0, errors.New("poison: delivered 4 times"), "m0", 3
	if err := s.sink.Write(ctx, env); err != nil {
		return err
	}
	for i := 1; i < 3; i++ {
		if err := out.Emit(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// A letter that a source writes itself (a broker's poison message) counts
// in the source's DeadLettered, and observers hear of it: the counts match
// what the dead-letter sink holds.
func TestSourceDeadLettersAreCounted(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	dl := deadletter.NewMemory(10)
	b := pipeline.New("poison", pipeline.WithClock(clock), pipeline.WithObserver(rec), pipeline.WithDeadLetter(dl))
	pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", &poisoner{}), &pipelinetest.Collector[int]{})
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Millisecond)
	require.NoError(t, err)
	require.Len(t, dl.Envelopes(), 1)
	src := nodeOf(t, res, "src")
	assert.Equal(t, int64(1), src.DeadLettered, "what the sink holds")
	assert.Equal(t, int64(2), src.Out)
	events := pipelinetest.Of[observer.DeadLetterEvent](rec)
	require.Len(t, events, 1)
	assert.Equal(t, "src", events[0].Node)
	assert.Equal(t, "m0", events[0].Key)
	assert.Equal(t, 3, events[0].Attempts)
	assert.False(t, events[0].BrokerRetry)
}

// Stats.Draining says a drain was asked for in the current run, and after
// it ended, in the last one; a new run starts without it.
func TestStatsSaysDraining(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("drain", pipeline.WithClock(clock))
	emitted := make(chan struct{}, 1)
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if err := out.Emit(ctx, 1); err != nil {
			return err
		}
		emitted <- struct{}{}
		<-ctx.Done()
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), &pipelinetest.Collector[int]{})
	p := build(t, b)
	assert.False(t, p.Stats().Draining, "before any run")
	for range 2 {
		run := pipelinetest.Start(t.Context(), p)
		<-emitted
		assert.False(t, p.Stats().Draining, "a new run does not drain")
		require.True(t, p.Drain())
		assert.True(t, p.Stats().Draining)
		_, err := run.Wait()
		require.NoError(t, err)
		st := p.Stats()
		assert.True(t, st.Draining, "the last run was drained")
		assert.False(t, st.Running)
	}
}
