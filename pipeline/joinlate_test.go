package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
)

// arrivals records the items a join took in, in the order it took them:
// its time functions run once per item, on the join's goroutine.
type arrivals struct {
	mu   sync.Mutex
	seen []arrived
}

type arrived struct {
	left bool
	e    ev
}

func (a *arrivals) at(left bool) func(ev) time.Time {
	return func(e ev) time.Time {
		a.mu.Lock()
		a.seen = append(a.seen, arrived{left, e})
		a.mu.Unlock()
		return e.At
	}
}

// lateOf recomputes which arrivals are late: each input's watermark is its
// latest time less bound, the join's the lower of the two once both
// brought an item, never going back; an item older than it is late.
func lateOf(seen []arrived, bound time.Duration) (lateL, lateR, onTimeL, onTimeR []ev) {
	var latest [2]time.Time
	var has [2]bool
	var wm time.Time
	wmSet := false
	for _, a := range seen {
		s := 1
		if a.left {
			s = 0
		}
		if !has[s] || a.e.At.After(latest[s]) {
			latest[s] = a.e.At
		}
		has[s] = true
		if has[0] && has[1] {
			m := latest[0]
			if latest[1].Before(m) {
				m = latest[1]
			}
			if m = m.Add(-bound); !wmSet || m.After(wm) {
				wm, wmSet = m, true
			}
		}
		late := wmSet && a.e.At.Before(wm)
		switch {
		case a.left && late:
			lateL = append(lateL, a.e)
		case a.left:
			onTimeL = append(onTimeL, a.e)
		case late:
			lateR = append(lateR, a.e)
		default:
			onTimeR = append(onTimeR, a.e)
		}
	}
	return lateL, lateR, onTimeL, onTimeR
}

func evIDs(items []ev) []int {
	ids := make([]int, len(items))
	for i, e := range items {
		ids[i] = e.ID
	}
	slices.Sort(ids)
	return ids
}

// pushBack moves about a sixth of items back in time by more than bound
// (their place in the input stays): each is then beyond the bound of the
// items around it.
func pushBack(r *rand.Rand, items []ev, bound time.Duration) []ev {
	for i := range items {
		if i > 0 && r.IntN(6) == 0 {
			items[i].At = items[i].At.Add(-bound - time.Nanosecond - time.Duration(r.Int64N(int64(5*time.Minute))))
		}
	}
	return items
}

// For any shuffle of each input, within the lateness bound and beyond it,
// in any interleaving of the two, a Join with JoinLate hands each late
// item to the late stream of its side, each once, and every pair of items
// that are not late whose times are less than within apart to its
// output: exactly what a recomputation over the order the join took them
// in finds. Nothing is dead-lettered; every tracked item ends once:
// Delivered when it joined or was late, else Filtered.
func TestJoinLateShuffledMatchesRecomputation(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			var lateSeen [2]int
			for seed := range uint64(seeds(16)) {
				r := rand.New(rand.NewPCG(seed, 41))
				bound := time.Duration(r.Int64N(int64(3*time.Minute))) + time.Second
				within := time.Duration(r.Int64N(int64(2*time.Minute))) + time.Second
				keys := 1 + r.IntN(4)
				lefts := pushBack(r, shuffleWithin(r, genItems(r, 1+r.IntN(80), keys, 20*time.Minute), bound), bound)
				rights := pushBack(r, shuffleWithin(r, genItems(r, 1+r.IntN(80), keys, 20*time.Minute), bound), bound)
				for i := range rights {
					rights[i].ID += 1000
				}
				arr := &arrivals{}
				b := pipeline.New("join", append([]pipeline.Option{pipeline.WithClock(clockwork.NewFakeClock())}, m.opts...)...)
				ls, rs := pipelinetest.NewTrackedSource(lefts...), pipelinetest.NewTrackedSource(rights...)
				var lateL, lateR pipeline.Stream[ev]
				joined := pipeline.Join(b, "j", pipeline.Source(b, "l", ls), pipeline.Source(b, "r", rs), evKey, evKey, within,
					func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) },
					pipeline.JoinEventTime(arr.at(true), arr.at(false), bound, 0), pipeline.JoinLate(&lateL, &lateR))
				col := &pipelinetest.Collector[string]{}
				pipeline.Sink(b, "store", joined, col)
				colL, colR := &pipelinetest.Collector[ev]{}, &pipelinetest.Collector[ev]{}
				pipeline.Sink(b, "late left", lateL, colL)
				pipeline.Sink(b, "late right", lateR, colR)
				res, err := build(t, b).Run(t.Context())
				require.NoError(t, err)

				arr.mu.Lock()
				seen := slices.Clone(arr.seen)
				arr.mu.Unlock()
				require.Len(t, seen, len(lefts)+len(rights), "seed %d: each item's time is taken once", seed)
				wantLateL, wantLateR, onTimeL, onTimeR := lateOf(seen, bound)
				lateSeen[0] += len(wantLateL)
				lateSeen[1] += len(wantLateR)
				assert.Equal(t, evIDs(wantLateL), evIDs(colL.Items()), "seed %d: late left", seed)
				assert.Equal(t, evIDs(wantLateR), evIDs(colR.Items()), "seed %d: late right", seed)
				want := joinPairs(onTimeL, onTimeR, within)
				got := col.Items()
				slices.Sort(got)
				assert.Equal(t, want, got, "seed %d: pairs", seed)
				st := nodeOf(t, res, "j")
				assert.Equal(t, int64(len(wantLateL)+len(wantLateR)), st.Late, "seed %d", seed)
				assert.Equal(t, int64(0), st.DeadLettered, "seed %d", seed)
				assert.Equal(t, int64(len(wantLateL)), nodeOf(t, res, "j[late left]").Out, "seed %d", seed)
				assert.Equal(t, int64(len(wantLateR)), nodeOf(t, res, "j[late right]").Out, "seed %d", seed)

				delivered := map[string]bool{}
				for _, p := range want {
					l, r, _ := strings.Cut(p, "-")
					delivered["l"+l], delivered["r"+r] = true, true
				}
				for _, e := range wantLateL {
					delivered[fmt.Sprintf("l%d", e.ID)] = true
				}
				for _, e := range wantLateR {
					delivered[fmt.Sprintf("r%d", e.ID)] = true
				}
				for side, src := range map[string]*pipelinetest.SliceSource[ev]{"l": ls, "r": rs} {
					items := lefts
					if side == "r" {
						items = rights
					}
					for i, o := range onceOf(t, src, len(items)) {
						want := node.Filtered
						if delivered[fmt.Sprintf("%s%d", side, items[i].ID)] {
							want = node.Delivered
						}
						assert.Equal(t, want, o, "seed %d: item %s%d", seed, side, items[i].ID)
					}
				}
			}
			if seeds(16) >= 16 {
				assert.True(t, lateSeen[0] > 0 && lateSeen[1] > 0, "the seeds made late items on both sides: %v", lateSeen)
			}
		})
	}
}

// phasedSource emits each phase's items once its gate opens, asking
// again after each yield of the processor.
type phasedSource struct {
	phases []phase
}

type phase struct {
	gate  func() bool
	items []ev
}

func (s *phasedSource) Run(ctx context.Context, out node.Emitter[ev]) error {
	for _, ph := range s.phases {
		deadline := time.Now().Add(spinBound)
		for ph.gate != nil && !ph.gate() {
			if err := ctx.Err(); err != nil {
				return err
			}
			spun(deadline, "the join to take the other input's items")
		}
		for _, e := range ph.items {
			if err := out.Emit(ctx, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// A Join with JoinLate, in a pipeline without a dead-letter sink: the late
// item of each side comes out of the stream of its side, the others join,
// and the graph shows the join's three branches.
func TestJoinLateEachSideToItsStream(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	b := pipeline.New("join", pipeline.WithHandOverBatch(1))
	var p *pipeline.Pipeline
	joinIn := func(n int64) func() bool {
		return func() bool { st, _ := p.Stats().Node("j"); return st.In >= n }
	}
	right := &phasedSource{phases: []phase{
		{items: []ev{{ID: 100, Key: 1, At: at(10 * time.Minute)}}},
		{gate: joinIn(4), items: []ev{
			{ID: 101, Key: 1, At: at(2 * time.Minute)},                // 7 minutes behind the watermark 9:00
			{ID: 102, Key: 1, At: at(9*time.Minute + 50*time.Second)}, // joins 0 and 2
		}},
	}}
	left := &phasedSource{phases: []phase{{gate: joinIn(1), items: []ev{
		{ID: 0, Key: 1, At: at(10 * time.Minute)},
		{ID: 1, Key: 1, At: at(time.Minute)},                    // 8 minutes behind the watermark 9:00
		{ID: 2, Key: 1, At: at(9*time.Minute + 30*time.Second)}, // behind 10:00, not 9:00
	}}}}
	var lateL, lateR pipeline.Stream[ev]
	joined := pipeline.Join(b, "j", pipeline.Source[ev](b, "l", left), pipeline.Source[ev](b, "r", right), evKey, evKey, time.Minute,
		func(l, r ev) string { return fmt.Sprintf("%d-%d", l.ID, r.ID) },
		pipeline.JoinEventTime(evAt, evAt, time.Minute, 0), pipeline.JoinLate(&lateL, &lateR))
	col := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "store", joined, col)
	colL, colR := &pipelinetest.Collector[ev]{}, &pipelinetest.Collector[ev]{}
	pipeline.Sink(b, "late left store", lateL, colL)
	pipeline.Sink(b, "late right store", lateR, colR)
	p = build(t, b)
	m := p.Graph().Mermaid()
	for _, name := range []string{"j<br>join", "j[joins]", "j[late left]", "j[late right]", "late left store", "late right store"} {
		assert.True(t, strings.Contains(m, name), "%s in\n%s", name, m)
	}
	assert.False(t, strings.Contains(m, "broadcast"), "each item goes to one branch, not to all:\n%s", m)
	kinds := map[string]pipeline.NodeKind{}
	for _, n := range p.Graph().Nodes {
		kinds[n.Name] = n.Kind
	}
	for _, name := range []string{"j[joins]", "j[late left]", "j[late right]"} {
		assert.Equal(t, pipeline.KindBranch, kinds[name], name)
	}
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	got := col.Items()
	slices.Sort(got)
	assert.Equal(t, []string{"0-100", "0-102", "2-100", "2-102"}, got)
	assert.Equal(t, []int{1}, evIDs(colL.Items()))
	assert.Equal(t, []int{101}, evIDs(colR.Items()))
	st := nodeOf(t, res, "j")
	assert.Equal(t, int64(2), st.Late)
	assert.Equal(t, int64(0), st.DeadLettered+st.Failed)
	assert.Equal(t, int64(6), st.Out, "four pairs and two late items leave the join")
	assert.Equal(t, int64(4), nodeOf(t, res, "j[joins]").Out)
}

// Build rejects JoinLate without JoinEventTime, with a nil pointer, with
// other types than the join's items, and on a node that is not a Join;
// Late on a Join, pointing to JoinLate; a late stream read by no node; a
// negative idle timeout.
func TestJoinLateBuildErrors(t *testing.T) {
	t.Parallel()
	join := func(b *pipeline.Builder, opts ...pipeline.NodeOption) {
		l := pipeline.Source(b, "l", pipelinetest.NewSliceSource[ev]())
		r := pipeline.Source(b, "r", pipelinetest.NewSliceSource[ev]())
		pipeline.Sink(b, "store", pipeline.Join(b, "j", l, r, evKey, evKey, time.Minute, func(l, r ev) int { return 0 }, opts...),
			&pipelinetest.Collector[int]{})
	}
	readLate := func(b *pipeline.Builder, lateL, lateR pipeline.Stream[ev]) {
		pipeline.Sink(b, "late left", lateL, &pipelinetest.Collector[ev]{})
		pipeline.Sink(b, "late right", lateR, &pipelinetest.Collector[ev]{})
	}
	et := pipeline.JoinEventTime(evAt, evAt, 0, 0)
	for name, tc := range map[string]struct {
		build func(*pipeline.Builder)
		want  string
	}{
		"without JoinEventTime": {func(b *pipeline.Builder) {
			var lateL, lateR pipeline.Stream[ev]
			join(b, pipeline.JoinLate(&lateL, &lateR))
			readLate(b, lateL, lateR)
		},
			`node "j": JoinLate: needs JoinEventTime`},
		"nil pointer": {func(b *pipeline.Builder) {
			var lateL pipeline.Stream[ev]
			join(b, et, pipeline.JoinLate[ev, ev](&lateL, nil))
		},
			`node "j": JoinLate: a stream pointer is nil`},
		"wrong type": {func(b *pipeline.Builder) {
			var lateL pipeline.Stream[ev]
			var ints pipeline.Stream[int]
			join(b, et, pipeline.JoinLate(&lateL, &ints))
		}, `node "j": JoinLate: the streams are of pipeline_test.ev and int`},
		"on a transform": {func(b *pipeline.Builder) {
			var lateL, lateR pipeline.Stream[ev]
			s := pipeline.Source(b, "src", pipelinetest.NewSliceSource[ev]())
			pipeline.Sink(b, "store", pipeline.Map(b, "m", s, func(_ context.Context, e ev) (ev, error) { return e, nil },
				pipeline.JoinLate(&lateL, &lateR)), &pipelinetest.Collector[ev]{})
		}, `node "m": JoinLate: only a Join has late left and right items`},
		"Late on a join": {func(b *pipeline.Builder) {
			var late pipeline.Stream[ev]
			join(b, et, pipeline.Late(&late))
		}, `node "j": Late: a Join's late items come from two inputs; take them with JoinLate(&lateLeft, &lateRight)`},
		"late stream unread": {func(b *pipeline.Builder) {
			var lateL, lateR pipeline.Stream[ev]
			join(b, et, pipeline.JoinLate(&lateL, &lateR))
			pipeline.Sink(b, "late left", lateL, &pipelinetest.Collector[ev]{})
		}, `node "j[late right]": output stream is consumed by no node`},
		"negative idle": {func(b *pipeline.Builder) { join(b, pipeline.JoinEventTime(evAt, evAt, 0, -time.Second)) },
			`node "j": JoinEventTime: idle -1s: must not be negative (0 turns the idle timeout off)`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("join", pipeline.WithDeadLetter(deadletter.NewMemory(1)))
			tc.build(b)
			_, err := b.Build()
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			assert.True(t, strings.Contains(err.Error(), tc.want), "%v\nwants %s", err, tc.want)
		})
	}
	// JoinLate stands in for the dead-letter sink.
	b := pipeline.New("join")
	var lateL, lateR pipeline.Stream[ev]
	join(b, et, pipeline.JoinLate(&lateL, &lateR))
	readLate(b, lateL, lateR)
	_, err := b.Build()
	require.NoError(t, err)
}
