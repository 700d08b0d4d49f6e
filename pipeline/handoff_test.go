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

// A simBroker is a source whose "broker" takes items over: every item is
// delivered, and delivered again once a hand-off settled, until each
// delivery reached another outcome. The broker's wait itself is not the
// engine's business, so it is not simulated.
type simBroker struct {
	after    time.Duration
	handable bool // HandOff succeeds
	ids      []int
	// refusals, when not nil, gets the id of each hand-off refused.
	refusals chan int

	mu       sync.Mutex
	queue    chan delivery
	pending  int
	handOffs []deadletter.HandOff
	resumes  []delivery
	outcomes map[int][]node.Outcome
	// handedOff holds each id's hand-offs until the delivery settles.
	handedOff map[int][]delivery
}

type delivery struct {
	id    int
	node  string
	retry int
	since time.Time
	b     *simBroker
}

func (d delivery) HandOff(_ context.Context, h deadletter.HandOff) error {
	if !d.b.handable {
		if d.b.refusals != nil {
			d.b.refusals <- d.id
		}
		return errors.New("broker refuses the hand-off")
	}
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.b.handOffs = append(d.b.handOffs, h)
	d.b.pending++
	// Delivered again once this delivery settled HandedOff, not at
	// once: a broker redelivers after its wait, and a redelivery that
	// raced the settle could record Delivered before HandedOff.
	d.b.handedOff[d.id] = append(d.b.handedOff[d.id], delivery{id: d.id, node: h.Envelope.DecisionNode, retry: h.Retry, since: h.Since, b: d.b})
	return nil
}

func (d delivery) Resumed() (deadletter.Resume, bool) {
	return deadletter.Resume{Node: d.node, Retry: d.retry, Since: d.since}, d.node != ""
}

func newSimBroker(after time.Duration, ids ...int) *simBroker {
	b := &simBroker{after: after, handable: true, ids: ids, queue: make(chan delivery, 64), outcomes: map[int][]node.Outcome{}, handedOff: map[int][]delivery{}}
	for _, id := range ids {
		b.pending++
		b.queue <- delivery{id: id, b: b}
	}
	return b
}

func (b *simBroker) HandOffAfter() time.Duration { return b.after }

func (b *simBroker) Run(ctx context.Context, out node.Emitter[delivery]) error {
	for {
		b.mu.Lock()
		left := b.pending
		b.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case d, ok := <-b.queue:
			if !ok {
				return nil
			}
			if ctx.Err() != nil {
				// A consumer that stops delivers no more: the delivery
				// stays on the broker.
				b.queue <- d
				return context.Cause(ctx)
			}
			if d.node != "" {
				b.mu.Lock()
				b.resumes = append(b.resumes, d)
				b.mu.Unlock()
			}
			if err := out.EmitTracked(ctx, d, func(o node.Outcome) {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.outcomes[d.id] = append(b.outcomes[d.id], o)
				if o == node.HandedOff && len(b.handedOff[d.id]) > 0 {
					b.queue <- b.handedOff[d.id][0]
					b.handedOff[d.id] = b.handedOff[d.id][1:]
				}
				b.pending--
				if b.pending == 0 {
					close(b.queue)
				}
			}); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// scripted fails each call of an item with the next error of its script.
type scripted struct {
	mu     sync.Mutex
	script map[int][]error
	calls  map[int]int
}

func (s *scripted) Process(_ context.Context, d delivery) (delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[int]int{}
	}
	n := s.calls[d.id]
	s.calls[d.id]++
	if n < len(s.script[d.id]) && s.script[d.id][n] != nil {
		return d, s.script[d.id][n]
	}
	return d, nil
}

func wait(d time.Duration) error { return resilience.RetryAfter(errors.New("busy"), d) }

// A retry that would wait at least the source's HandOffAfter is handed to
// its broker and holds no worker (the fake clock never moves, and the run
// ends); shorter waits stay in process; the next delivery continues the
// count where the hand-off left it.
func TestHandOffGivesLongWaitsToTheBroker(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClock()
		rec := &pipelinetest.Recorder{}
		dl := deadletter.NewMemory(10)
		b := pipeline.New("handoff", pipeline.WithClock(clock), pipeline.WithObserver(rec), pipeline.WithDeadLetter(dl),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 5
				o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
				o.OnItemFailure = resilience.DeadLetter
			}))
		br := newSimBroker(time.Minute, 1, 2)
		f := &scripted{script: map[int][]error{
			// In process, in process, handed off (retry 3); handed off
			// again (retry 4); then it works.
			1: {wait(0), wait(0), wait(time.Hour), wait(2 * time.Hour), nil},
		}}
		out := pipeline.Transform[delivery, delivery](b, "call", pipeline.Source[delivery](b, "src", br), f)
		col := &pipelinetest.Collector[delivery]{}
		pipeline.Sink(b, "sink", out, col)
		start := clock.Now()
		res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Millisecond)
		require.NoError(t, err)
		assert.Less(t, clock.Since(start), time.Minute, "no wait of a minute or more was held in process")

		require.Len(t, br.handOffs, 2)
		h1, h2 := br.handOffs[0], br.handOffs[1]
		assert.Equal(t, 3, h1.Retry)
		assert.Equal(t, time.Hour, h1.Delay)
		assert.Equal(t, 3, h1.Envelope.Attempts, "calls of the first delivery")
		assert.Equal(t, "call", h1.Envelope.DecisionNode)
		assert.Equal(t, 1, h1.Envelope.Item.(delivery).id)
		assert.Equal(t, 4, h2.Retry, "the second delivery's call was retry 3; the next is 4")
		assert.Equal(t, 2*time.Hour, h2.Delay)
		assert.Equal(t, 1, h2.Envelope.Attempts)

		assert.Equal(t, []node.Outcome{node.HandedOff, node.HandedOff, node.Delivered}, br.outcomes[1])
		assert.Equal(t, []node.Outcome{node.Delivered}, br.outcomes[2])
		assert.Equal(t, 5, f.calls[1])
		assert.Equal(t, int64(2), nodeOf(t, res, "call").HandedOff)
		assert.Equal(t, int64(4), nodeOf(t, res, "call").ItemRetries)
		assert.Zero(t, nodeOf(t, res, "call").Failed)
		assert.Equal(t, 2, col.Len())
		assert.Empty(t, dl.Envelopes())
		assert.Contains(t, res.String(), "handed off", "the table shows the column when a node handed items off")

		var attempts []int
		var handed []bool
		for _, e := range pipelinetest.Of[observer.RetryEvent](rec) {
			attempts, handed = append(attempts, e.Attempt), append(handed, e.HandedOff)
		}
		assert.Equal(t, []int{1, 2, 3, 4}, attempts)
		assert.Equal(t, []bool{false, false, true, true}, handed)
	}
}

// A resumed count runs out as it would have in process: MaxRetries = 3,
// retry 3 is handed off, and its failure exhausts the item.
func TestHandOffResumedCountExhausts(t *testing.T) {
	t.Parallel()
	dl := deadletter.NewMemory(10)
	clock := clockwork.NewFakeClock()
	b := pipeline.New("handoff", pipeline.WithClock(clock), pipeline.WithDeadLetter(dl),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
			o.OnItemFailure = resilience.DeadLetter
		}))
	br := newSimBroker(time.Minute, 1)
	f := &scripted{script: map[int][]error{1: {wait(0), wait(0), wait(time.Hour), wait(time.Hour), nil}}}
	out := pipeline.Transform[delivery, delivery](b, "call", pipeline.Source[delivery](b, "src", br), f)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[delivery]{})
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 4, f.calls[1], "3 calls, then retry 3 in the next delivery")
	assert.Equal(t, []node.Outcome{node.HandedOff, node.DeadLettered}, br.outcomes[1])
	require.Len(t, dl.Envelopes(), 1)
	var re *resilience.RetryExhaustedError
	assert.ErrorAs(t, dl.Envelopes()[0].Err, &re)
	assert.Equal(t, int64(1), nodeOf(t, res, "call").HandedOff)
}

// A hand-off the broker refuses, an item that is one of two broadcast
// parts, and a source that offers no hand-off: each waits in process.
func TestHandOffFallsBackToWaitingInProcess(t *testing.T) {
	t.Parallel()
	cases := map[string]func(br *simBroker) node.Source[delivery]{
		"refused": func(br *simBroker) node.Source[delivery] { br.handable = false; return br },
		"no offer": func(br *simBroker) node.Source[delivery] {
			return node.SourceFunc[delivery](br.Run) // hides HandOffAfter
		},
		"broadcast": func(br *simBroker) node.Source[delivery] { return br },
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			b := pipeline.New("handoff", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
				}))
			br := newSimBroker(time.Minute, 1)
			f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil}}}
			s := pipeline.Source[delivery](b, "src", src(br))
			out := pipeline.Transform[delivery, delivery](b, "call", s, f)
			col := &pipelinetest.Collector[delivery]{}
			pipeline.Sink(b, "sink", out, col)
			if name == "broadcast" {
				pipeline.Sink(b, "other", s, &pipelinetest.Collector[delivery]{})
			}
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Minute)
			require.NoError(t, err)
			assert.Empty(t, br.handOffs)
			assert.Equal(t, []node.Outcome{node.Delivered}, br.outcomes[1])
			assert.Equal(t, 2, f.calls[1])
			assert.Zero(t, nodeOf(t, res, "call").HandedOff)
			assert.Equal(t, 1, col.Len(), "%v", col.Items())
		})
	}
}

// A run's Result counts its own hand-offs; Stats counts every run's.
func TestHandOffCountsPerRun(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("handoff", pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
		}))
	br := newSimBroker(time.Minute)
	f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil, wait(time.Hour), nil}}}
	out := pipeline.Transform[delivery, delivery](b, "call", pipeline.Source[delivery](b, "src", br), f)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[delivery]{})
	p := build(t, b)
	for run := 1; run <= 2; run++ {
		br.mu.Lock()
		br.queue, br.pending = make(chan delivery, 64), 1
		br.queue <- delivery{id: 1, b: br}
		br.mu.Unlock()
		res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, int64(1), nodeOf(t, res, "call").HandedOff, "run %d", run)
		st, _ := p.Stats().Node("call")
		assert.Equal(t, int64(run), st.HandedOff)
	}
}
