package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// joinPairs recomputes an event-time join: every left and right item of
// one key less than within apart in event time, as "lID-rID".
func joinPairs(lefts, rights []ev, within time.Duration) []string {
	var out []string
	for _, l := range lefts {
		for _, r := range rights {
			d := l.At.Sub(r.At)
			if l.Key == r.Key && d < within && -d < within {
				out = append(out, fmt.Sprintf("%d-%d", l.ID, r.ID))
			}
		}
	}
	slices.Sort(out)
	return out
}

// For any shuffle of each input within the lateness bound, in any
// interleaving of the two, a Join on event time hands on exactly the pairs
// a recomputation over event time finds, each once, with no late item; an
// item that joined ends Delivered, one that did not Filtered. The fake
// clock never moves: expiry follows the watermark, not the clock.
func TestJoinEventTimeShuffledMatchesRecomputation(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds(16)) {
				r := rand.New(rand.NewPCG(seed, 37))
				bound := time.Duration(r.Int64N(int64(3*time.Minute))) + time.Second
				within := time.Duration(r.Int64N(int64(2*time.Minute))) + time.Second
				keys := 1 + r.IntN(4)
				lefts := shuffleWithin(r, genItems(r, r.IntN(80), keys, 20*time.Minute), bound)
				rights := shuffleWithin(r, genItems(r, 1+r.IntN(80), keys, 20*time.Minute), bound)
				for i := range rights {
					rights[i].ID += 1000
				}
				want := joinPairs(lefts, rights, within)
				dlq := deadletter.NewMemory(10)
				b := pipeline.New("join", append([]pipeline.Option{pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithDeadLetter(dlq)}, m.opts...)...)
				ls, rs := pipelinetest.NewTrackedSource(lefts...), pipelinetest.NewTrackedSource(rights...)
				joined := pipeline.Join(b, "j", pipeline.Source(b, "l", ls), pipeline.Source(b, "r", rs), evKey, evKey, within,
					func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) }, pipeline.JoinEventTime(evAt, evAt, bound, 0))
				col := &pipelinetest.Collector[string]{}
				pipeline.Sink(b, "store", joined, col)
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				got := col.Items()
				slices.Sort(got)
				assert.Equal(t, want, got, "seed %d", seed)
				st := nodeOf(t, res, "j")
				assert.Equal(t, int64(0), st.Late, "seed %d", seed)
				assert.Len(t, dlq.Envelopes(), 0, "seed %d", seed)
				joinedIDs := map[string]bool{}
				for _, p := range want {
					l, r, _ := strings.Cut(p, "-")
					joinedIDs["l"+l], joinedIDs["r"+r] = true, true
				}
				for side, src := range map[string]*pipelinetest.SliceSource[ev]{"l": ls, "r": rs} {
					items := lefts
					if side == "r" {
						items = rights
					}
					outcomes := onceOf(t, src, len(items))
					for i, e := range items {
						want := node.Filtered
						if joinedIDs[fmt.Sprintf("%s%d", side, e.ID)] {
							want = node.Delivered
						}
						assert.Equal(t, want, outcomes[i], "seed %d: item %s%d", seed, side, e.ID)
					}
				}
			}
		})
	}
}

// afterSource emits its items once open returns true, asking it again
// after each yield of the processor: it waits for the other input's items
// to reach the join, without a timer.
type afterSource struct {
	items []ev
	open  func() bool
}

func (s *afterSource) Run(ctx context.Context, out node.Emitter[ev]) error {
	deadline := time.Now().Add(spinBound)
	for !s.open() {
		if err := ctx.Err(); err != nil {
			return err
		}
		spun(deadline, "the other input to reach the join")
	}
	for _, e := range s.items {
		if err := out.EmitTracked(ctx, e, func(node.Outcome) {}); err != nil {
			return err
		}
	}
	return nil
}

// A Join on event time: an item older than the watermark (the lower of
// the two inputs' latest times less maxLateness) is late: counted in
// NodeStats.Late and dead-lettered with a LateError; an item behind the
// latest time but not the watermark still joins.
func TestJoinEventTimeLateItemsDeadLettered(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("join", pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(dlq))
	var p *pipeline.Pipeline
	joinIn := func() int64 {
		for _, n := range p.Stats().Nodes {
			if n.Node == "j" {
				return n.In
			}
		}
		return 0
	}
	right := pipelinetest.NewSliceSource(ev{ID: 100, Key: 1, At: at(10 * time.Minute)})
	left := &afterSource{open: func() bool { return joinIn() >= 1 }, items: []ev{
		{ID: 0, Key: 1, At: at(10 * time.Minute)},
		{ID: 1, Key: 1, At: at(time.Minute)},                    // 8 minutes behind the watermark 9:00
		{ID: 2, Key: 1, At: at(9*time.Minute + 30*time.Second)}, // behind 10:00, not 9:00
		{ID: 3, Key: 2, At: at(9 * time.Minute)},                // at the watermark: not late
	}}
	joined := pipeline.Join(b, "j", pipeline.Source[ev](b, "l", left), pipeline.Source(b, "r", right), evKey, evKey, time.Minute,
		func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) }, pipeline.JoinEventTime(evAt, evAt, time.Minute, 0))
	col := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", joined, col)
	p = build(t, b)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	got := col.Items()
	slices.Sort(got)
	assert.Equal(t, []string{"0-100", "2-100"}, got)
	st := nodeOf(t, res, "j")
	assert.Equal(t, int64(1), st.Late)
	assert.Equal(t, int64(1), st.DeadLettered)
	envs := dlq.Envelopes()
	require.Len(t, envs, 1)
	assert.Equal(t, 1, envs[0].Item.(ev).ID)
	var le *pipeline.LateError
	require.ErrorAs(t, envs[0].Err, &le)
	assert.Equal(t, at(time.Minute), le.EventTime)
	assert.Equal(t, at(9*time.Minute), le.Watermark)
	assert.Equal(t, "j", envs[0].OriginNode)
	// Result.String shows a late column, since a node counted some.
	lines := strings.Split(res.String(), "\n")
	require.True(t, len(lines) > 2, res.String())
	head := strings.Fields(strings.ReplaceAll(lines[1], "node retries", "node-retries"))
	lateCol := slices.Index(head, "late")
	require.True(t, lateCol > 0, "no late column in %q", lines[1])
	for _, l := range lines[2:] {
		if f := strings.Fields(l); len(f) > lateCol && f[0] == "j" {
			assert.Equal(t, "1", f[lateCol], "the join's late count")
		}
	}
}

// Result.String has no late column when no node counted a late item.
func TestResultStringWithoutLateItemsHasNoLateColumn(t *testing.T) {
	t.Parallel()
	b := pipeline.New("join", pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	l := pipeline.Source(b, "l", pipelinetest.NewSliceSource(ev{ID: 1, At: epoch}))
	r := pipeline.Source(b, "r", pipelinetest.NewSliceSource(ev{ID: 2, At: epoch}))
	pipeline.Sink(b, "store", pipeline.Join(b, "j", l, r, evKey, evKey, time.Minute, func(l, r ev) int { return l.ID + r.ID },
		pipeline.JoinEventTime(evAt, evAt, 0, 0)), &pipelinetest.Collector[int]{})
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	head := strings.Split(res.String(), "\n")[1]
	assert.False(t, slices.Contains(strings.Fields(head), "late"), head)
	assert.Equal(t, int64(1), nodeOf(t, res, "j").Out)
}

// Build rejects JoinEventTime on a node that is not a Join, with a nil
// time function, a negative maxLateness, time functions of other types
// than the join's items, and without a dead-letter sink for late items.
func TestJoinEventTimeBuildErrors(t *testing.T) {
	t.Parallel()
	dl := pipeline.WithDeadLetter(deadletter.NewMemory(1))
	join := func(b *pipeline.Builder, opt pipeline.NodeOption) {
		l := pipeline.Source(b, "l", pipelinetest.NewSliceSource[ev]())
		r := pipeline.Source(b, "r", pipelinetest.NewSliceSource[ev]())
		pipeline.Sink(b, "store", pipeline.Join(b, "j", l, r, evKey, evKey, time.Minute, func(l, r ev) int { return 0 }, opt),
			&pipelinetest.Collector[int]{})
	}
	for name, tc := range map[string]struct {
		build func(*pipeline.Builder)
		opts  []pipeline.Option
		want  string
	}{
		"on a transform": {func(b *pipeline.Builder) {
			s := pipeline.Source(b, "src", pipelinetest.NewSliceSource[ev]())
			pipeline.Sink(b, "store", pipeline.Map(b, "m", s, func(_ context.Context, e ev) (ev, error) { return e, nil },
				pipeline.JoinEventTime(evAt, evAt, 0, 0)), &pipelinetest.Collector[ev]{})
		}, []pipeline.Option{dl}, `node "m": JoinEventTime: only a Join matches on event time`},
		"nil function": {func(b *pipeline.Builder) { join(b, pipeline.JoinEventTime[ev, ev](evAt, nil, 0, 0)) },
			[]pipeline.Option{dl}, `node "j": JoinEventTime: a time function is nil`},
		"negative": {func(b *pipeline.Builder) { join(b, pipeline.JoinEventTime(evAt, evAt, -time.Second, 0)) },
			[]pipeline.Option{dl}, `node "j": JoinEventTime: maxLateness -1s: must not be negative`},
		"wrong type": {func(b *pipeline.Builder) {
			join(b, pipeline.JoinEventTime(evAt, func(int) time.Time { return epoch }, 0, 0))
		}, []pipeline.Option{dl}, `node "j": JoinEventTime: the time functions take pipeline_test.ev and int`},
		"no dead-letter sink": {func(b *pipeline.Builder) { join(b, pipeline.JoinEventTime(evAt, evAt, 0, 0)) },
			nil, `node "j": JoinEventTime: late items are dead-lettered, and the pipeline has no dead-letter sink`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("join", tc.opts...)
			tc.build(b)
			_, err := b.Build()
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			assert.True(t, strings.Contains(err.Error(), tc.want), "%v\nwants %s", err, tc.want)
		})
	}
}

// JoinEventTime's window is open at within: a pair exactly within apart
// does not join, one a nanosecond nearer does, with the left item earlier
// and with the right one earlier. maxLateness is an hour, so nothing
// expires before the end of input, whatever the interleaving.
func TestJoinEventTimeWithinIsExclusive(t *testing.T) {
	t.Parallel()
	const within = time.Minute
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	lefts := []ev{
		{ID: 1, Key: 1, At: at(0)},                        // right 101 exactly within later
		{ID: 2, Key: 2, At: at(0)},                        // right 102 just under within later
		{ID: 3, Key: 3, At: at(within)},                   // right 103 exactly within earlier
		{ID: 4, Key: 4, At: at(within - time.Nanosecond)}, // right 104 just under within earlier
	}
	rights := []ev{
		{ID: 101, Key: 1, At: at(within)},
		{ID: 102, Key: 2, At: at(within - time.Nanosecond)},
		{ID: 103, Key: 3, At: at(0)},
		{ID: 104, Key: 4, At: at(0)},
	}
	b := pipeline.New("join", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	joined := pipeline.Join(b, "j", pipeline.Source(b, "l", pipelinetest.NewSliceSource(lefts...)),
		pipeline.Source(b, "r", pipelinetest.NewSliceSource(rights...)), evKey, evKey, within,
		func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) }, pipeline.JoinEventTime(evAt, evAt, time.Hour, 0))
	col := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", joined, col)
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	got := col.Items()
	slices.Sort(got)
	assert.Equal(t, []string{"2-102", "4-104"}, got)
	assert.Equal(t, joinPairs(lefts, rights, within), got, "the recomputation agrees")
}

// quietSource brings nothing: it waits until open returns true, then
// calls ended and ends.
type quietSource struct {
	open  func() bool
	ended func()
}

func (s *quietSource) Run(ctx context.Context, _ node.Emitter[ev]) error {
	deadline := time.Now().Add(spinBound)
	for !s.open() {
		if err := ctx.Err(); err != nil {
			return err
		}
		spun(deadline, "the other input to reach the join")
	}
	s.ended()
	return nil
}

// A Join on event time whose one input is quiet has no watermark: the
// other input's items, ten hours apart with a window of a minute, all wait
// (none has an outcome, so each holds its checkpoint position) until the
// quiet input ends, and are then let go, Filtered.
func TestJoinEventTimeQuietInputHoldsTheOther(t *testing.T) {
	t.Parallel()
	var lefts []ev
	for i := range 10 {
		lefts = append(lefts, ev{ID: i, Key: i, At: epoch.Add(time.Duration(i) * time.Hour)})
	}
	b := pipeline.New("join", pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	var p *pipeline.Pipeline
	ls := pipelinetest.NewTrackedSource(lefts...)
	heldAtEnd := -1
	quiet := &quietSource{
		open: func() bool {
			for _, n := range p.Stats().Nodes {
				if n.Node == "j" {
					return n.In >= int64(len(lefts))
				}
			}
			return false
		},
		ended: func() { heldAtEnd = len(lefts) - len(ls.Outcomes()) },
	}
	joined := pipeline.Join(b, "j", pipeline.Source(b, "l", ls), pipeline.Source[ev](b, "r", quiet), evKey, evKey, time.Minute,
		func(l, r ev) string { return "" }, pipeline.JoinEventTime(evAt, evAt, 0, 0))
	pipeline.Sink(b, "store", joined, &pipelinetest.Collector[string]{})
	p = build(t, b)
	_, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, len(lefts), heldAtEnd, "left items still waiting when the quiet input ended")
	for i, o := range onceOf(t, ls, len(lefts)) {
		assert.Equal(t, node.Filtered, o, "item %d", i)
	}
}
