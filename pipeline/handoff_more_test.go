package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// clockBroker is simBroker whose broker really holds an item for its
// delay: the fake clock advances by h.Delay at each hand-off.
type clockBroker struct {
	*simBroker
	clock *clockwork.FakeClock
}

type cdelivery struct {
	delivery
	cb *clockBroker
}

func (d cdelivery) HandOff(ctx context.Context, h deadletter.HandOff) error {
	d.cb.clock.Advance(h.Delay)
	d.cb.mu.Lock()
	defer d.cb.mu.Unlock()
	d.cb.handOffs = append(d.cb.handOffs, h)
	d.cb.pending++
	d.cb.queue <- delivery{id: d.id, node: h.Envelope.DecisionNode, retry: h.Retry, since: h.Since, b: d.cb.simBroker}
	return nil
}

func (cb *clockBroker) Run(ctx context.Context, out node.Emitter[cdelivery]) error {
	return cb.simBroker.Run(ctx, emitAs{out, cb})
}

type emitAs struct {
	out node.Emitter[cdelivery]
	cb  *clockBroker
}

func (e emitAs) Emit(ctx context.Context, d delivery) error {
	return e.out.Emit(ctx, cdelivery{d, e.cb})
}
func (e emitAs) EmitAt(ctx context.Context, d delivery, pos []byte) error {
	return e.out.EmitAt(ctx, cdelivery{d, e.cb}, pos)
}

func (e emitAs) EmitTracked(ctx context.Context, d delivery, done func(node.Outcome)) error {
	return e.out.EmitTracked(ctx, cdelivery{d, e.cb}, done)
}

type cscripted struct {
	mu    sync.Mutex
	calls int
}

func (s *cscripted) Process(_ context.Context, d cdelivery) (cdelivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return d, wait(time.Hour)
}

// MaxElapsed bounds an item's retries the same in process and handed off:
// the hand-off carries when the retries started, and each delivery counts
// from there (the fake broker moves the clock by each wait it holds).
func TestHandOffKeepsMaxElapsed(t *testing.T) {
	t.Parallel()
	for _, after := range []time.Duration{0, time.Minute} { // 0: in process
		clock := clockwork.NewFakeClock()
		dl := deadletter.NewMemory(10)
		b := pipeline.New("handoff", pipeline.WithClock(clock), pipeline.WithDeadLetter(dl),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 10
				o.ItemRetry.MaxElapsed = 2 * time.Hour
				o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
				o.OnItemFailure = resilience.DeadLetter
			}))
		cb := &clockBroker{simBroker: newSimBroker(after, 1), clock: clock}
		f := &cscripted{}
		out := pipeline.Transform[cdelivery, cdelivery](b, "call", pipeline.Source[cdelivery](b, "src", cb), f)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[cdelivery]{})
		start := clock.Now()
		_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Minute)
		require.NoError(t, err)
		t.Logf("HandOffAfter %v: %d calls over %v, %d hand-offs", after, f.calls, clock.Since(start), len(cb.handOffs))
		require.Len(t, dl.Envelopes(), 1)
		var re *resilience.RetryExhaustedError
		require.ErrorAs(t, dl.Envelopes()[0].Err, &re)
		assert.Equal(t, resilience.LimitElapsed, re.Limit, "HandOffAfter %v: exhausted by MaxElapsed", after)
		assert.Equal(t, 3, f.calls, "HandOffAfter %v: calls within MaxElapsed = 2h of 1h waits", after)
	}
}

// A blame ends when a node restart takes the item up again. Item 0 fails
// node "flaky" once (Fail action), the node restarts and item 0 goes
// through; the run then fails because of item 1 at the sink while item 0
// is still in flight: item 0 is Failed, item 1 Rejected (a broker source
// counts only the latter towards its poison limit).
func TestBlameEndsWhenARestartTakesTheItemUp(t *testing.T) {
	t.Parallel()
	errFlaky := resilience.MarkTransient(errorString("flaky"))
	errBad := resilience.MarkPermanent(errorString("bad"))
	clock := clockwork.NewFakeClock()
	b := pipeline.New("blame", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	src := pipelinetest.NewTrackedSource(0, 1)
	flaky := pipelinetest.NewFaults(map[int][]error{0: {errFlaky}})
	tr := pipeline.Transform[int, int](b, "flaky", pipeline.Source[int](b, "src", src), flaky,
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 1, Backoff: resilience.Constant(0), MaxReplayWindow: 8}
		}))
	started := make(chan struct{})
	pipeline.Sink(b, "store", tr, node.SinkFunc[int](func(ctx context.Context, v int) error {
		if v == 0 {
			close(started)
			<-ctx.Done() // item 0 is slow: in flight when the run fails, until the grace period ends
			return ctx.Err()
		}
		<-started
		return errBad
	}), pipeline.Parallel(2), pipeline.Unordered())
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), pipeline.DefaultFailGrace)
	require.ErrorIs(t, err, errBad)
	assert.Equal(t, 2, flaky.Calls(0), "item 0 failed once, then went through after the restart")
	got := src.Outcomes()
	assert.Equal(t, []node.Outcome{node.Rejected}, got[1], "item 1 failed the run")
	assert.Equal(t, []node.Outcome{node.Failed}, got[0], "item 0 was only in flight")
}

type errorString string

func (e errorString) Error() string { return string(e) }

// Hand-offs in parallel nodes under node restart with a replay
// window: every item ends once per delivery, each hand-off is followed by
// exactly one more delivery, and the sink sees each item once.
func TestHandOffParallelRestart(t *testing.T) {
	t.Parallel()
	for _, unordered := range []bool{false, true} {
		for range 10 {
			clock := clockwork.NewFakeClock()
			b := pipeline.New("handoff", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 5
					o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
					o.OnItemFailure = resilience.Fail
					o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 100, Backoff: resilience.Constant(0), MaxReplayWindow: 16}
				}))
			const n = 60
			ids := make([]int, n)
			script := map[int][]error{}
			for i := range ids {
				ids[i] = i
				switch i % 4 {
				case 0:
					script[i] = []error{resilience.MarkPermanent(errorString("boom")), wait(time.Hour), nil}
				case 1:
					script[i] = []error{wait(time.Hour), wait(0), wait(time.Hour), nil}
				}
			}
			br := newSimBroker(time.Minute, ids...)
			f := &scripted{script: script}
			opts := []pipeline.NodeOption{pipeline.Parallel(4)}
			if unordered {
				opts = append(opts, pipeline.Unordered())
			}
			out := pipeline.Transform[delivery, delivery](b, "call", pipeline.Source[delivery](b, "src", br), f, opts...)
			col := &pipelinetest.Collector[delivery]{}
			pipeline.Sink(b, "sink", out, col)
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Millisecond)
			require.NoError(t, err)
			seen := map[int]int{}
			for _, d := range col.Items() {
				seen[d.id]++
			}
			for _, id := range ids {
				assert.Equal(t, 1, seen[id], "item %d written once", id)
				// One delivery ends Delivered, every other one HandedOff.
				// The order of the outcomes is not the deliveries': the
				// broker may deliver a handed-off item again, and that
				// delivery end, before the hand-off's done has run.
				os := br.outcomes[id]
				require.NotEmpty(t, os, "item %d", id)
				assert.Equal(t, 1, countOf(os, node.Delivered), "item %d: %v", id, os)
				assert.Equal(t, len(os)-1, countOf(os, node.HandedOff), "item %d: %v", id, os)
			}
		}
	}
}

func countOf(os []node.Outcome, o node.Outcome) int {
	n := 0
	for _, x := range os {
		if x == o {
			n++
		}
	}
	return n
}
