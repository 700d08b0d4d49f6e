package pipeline_test

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// ev is an item with its own time.
type ev struct {
	ID, Key, V int
	At         time.Time
}

func evAt(e ev) time.Time { return e.At }
func evKey(e ev) int      { return e.Key }
func evZero() int         { return 0 }
func evSum(a int, e ev) int {
	return a + e.V
}

var epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// winKey names a window: its key and start.
type winKey struct {
	key   int
	start time.Time
}

type winSum struct{ count, value int }

// reference computes, from the items in arrival order, which are late
// (behind the watermark, the latest time so far less maxLateness, by
// more than allowed) and each time window's total over the others: a
// plain recomputation over event time.
func reference(items []ev, size, step, maxLateness, allowed time.Duration) (late map[int]bool, wins map[winKey]winSum) {
	late, wins = map[int]bool{}, map[winKey]winSum{}
	var latest time.Time
	for i, e := range items {
		if i == 0 || e.At.After(latest) {
			latest = e.At
		}
		wm := latest.Add(-maxLateness)
		if i > 0 && e.At.Before(wm.Add(-allowed)) {
			late[e.ID] = true
			continue
		}
		for st := e.At.Truncate(step); e.At.Before(st.Add(size)); st = st.Add(-step) {
			k := winKey{e.Key, st}
			w := wins[k]
			w.count++
			w.value += e.V
			wins[k] = w
		}
	}
	return late, wins
}

// genItems makes n items of keys 0..keys-1 with times spread over span,
// in the order of their time.
func genItems(r *rand.Rand, n, keys int, span time.Duration) []ev {
	items := make([]ev, n)
	for i := range items {
		items[i] = ev{ID: i, Key: r.IntN(keys), V: r.IntN(100), At: epoch.Add(time.Duration(r.Int64N(int64(span))))}
	}
	slices.SortStableFunc(items, func(a, b ev) int { return a.At.Compare(b.At) })
	return items
}

// shuffleWithin reorders items so that none comes after an item more
// than bound later in time than itself: each is sorted by its time plus
// a random delay of at most bound.
func shuffleWithin(r *rand.Rand, items []ev, bound time.Duration) []ev {
	type keyed struct {
		e  ev
		at time.Time
	}
	ks := make([]keyed, len(items))
	for i, e := range items {
		ks[i] = keyed{e, e.At.Add(time.Duration(r.Int64N(int64(bound) + 1)))}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return a.at.Compare(b.at) })
	out := make([]ev, len(ks))
	for i, k := range ks {
		out[i] = k.e
	}
	return out
}

// runEventWindows runs items through an event-time Aggregate with a Late
// output and returns the windows, the late items and the node's counts.
func runEventWindows(t *testing.T, opts []pipeline.Option, items []ev, spec pipeline.WindowSpec, maxLateness, allowed time.Duration) ([]pipeline.Window[int, int], []ev, pipeline.NodeStats) {
	t.Helper()
	b := pipeline.New("et", opts...)
	var late pipeline.Stream[ev]
	nodeOpts := []pipeline.NodeOption{pipeline.EventTime(evAt, maxLateness, 0), pipeline.Late(&late)}
	if allowed > 0 {
		nodeOpts = append(nodeOpts, pipeline.AllowedLateness(allowed))
	}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewSliceSource(items...)), evKey, spec, evZero, evSum, nodeOpts...)
	col := &pipelinetest.Collector[pipeline.Window[int, int]]{}
	lateCol := &pipelinetest.Collector[ev]{}
	pipeline.Sink(b, "store", wins, col)
	pipeline.Sink(b, "late", late, lateCol)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	return col.Items(), lateCol.Items(), nodeOf(t, res, "sum")
}

// finals folds windows handed on, updates replacing what they correct,
// into each window's last total; it fails the test when a window is
// handed on twice without Update, or an Update comes first.
func finals(t *testing.T, got []pipeline.Window[int, int]) map[winKey]winSum {
	t.Helper()
	out := map[winKey]winSum{}
	for _, w := range got {
		k := winKey{w.Key, w.Start}
		_, seen := out[k]
		assert.Equal(t, seen, w.Update, "window %v: Update says whether it was handed on before", k)
		out[k] = winSum{w.Count, w.Value}
	}
	return out
}

// For any shuffle within the lateness bound, the totals per window equal a
// plain recomputation over event time, each window is handed on once, and
// no item is late; tumbling and sliding windows, over many seeds.
func TestEventTimeShuffleWithinBoundMatchesRecomputation(t *testing.T) {
	t.Parallel()
	specs := []struct {
		name       string
		size, step time.Duration
	}{
		{"tumbling", time.Minute, time.Minute},
		{"sliding", 3 * time.Minute, time.Minute},
	}
	for _, m := range modes {
		for _, sp := range specs {
			t.Run(m.name+"/"+sp.name, func(t *testing.T) {
				t.Parallel()
				for seed := range uint64(seeds(16)) {
					r := rand.New(rand.NewPCG(seed, 33))
					bound := time.Duration(r.Int64N(int64(5*time.Minute))) + time.Second
					items := shuffleWithin(r, genItems(r, 1+r.IntN(200), 1+r.IntN(4), 30*time.Minute), bound)
					late, want := reference(items, sp.size, sp.step, bound, 0)
					require.Len(t, late, 0, "seed %d: the shuffle is within the bound", seed)
					got, lateItems, st := runEventWindows(t, m.opts, items, pipeline.SlidingWindow(sp.size, sp.step), bound, 0)
					assert.Equal(t, want, finals(t, got), "seed %d", seed)
					assert.Len(t, got, len(want), "seed %d: each window once", seed)
					assert.Len(t, lateItems, 0, "seed %d", seed)
					assert.Equal(t, int64(0), st.Late, "seed %d", seed)
				}
			})
		}
	}
}

// For any order at all, items behind the watermark by more than the
// allowed lateness are all in the Late output and counted, and the
// windows' last totals (updates included) are a recomputation over the
// others; an update comes only after its window's first hand-over.
func TestEventTimeAnyShuffleLateItemsAllAccounted(t *testing.T) {
	t.Parallel()
	for _, allowed := range []time.Duration{0, 2 * time.Minute} {
		t.Run(allowed.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds(24)) {
				r := rand.New(rand.NewPCG(seed, 34))
				items := genItems(r, 1+r.IntN(150), 1+r.IntN(3), 20*time.Minute)
				// Some items far out of place: a replay, a redelivery.
				for range r.IntN(20) {
					i, j := r.IntN(len(items)), r.IntN(len(items))
					items[i], items[j] = items[j], items[i]
				}
				bound := time.Duration(r.Int64N(int64(time.Minute)))
				late, want := reference(items, time.Minute, time.Minute, bound, allowed)
				got, lateItems, st := runEventWindows(t, nil, items, pipeline.TimeWindow(time.Minute), bound, allowed)
				assert.Equal(t, want, finals(t, got), "seed %d", seed)
				gotLate := map[int]bool{}
				for _, e := range lateItems {
					gotLate[e.ID] = true
				}
				assert.Equal(t, late, gotLate, "seed %d: exactly the late items", seed)
				assert.Equal(t, int64(len(late)), st.Late, "seed %d", seed)
				if allowed == 0 {
					for _, w := range got {
						assert.False(t, w.Update, "seed %d: no allowed lateness, no update", seed)
					}
				}
			}
		})
	}
}

// Count windows on event time take a key's items in the order of their
// time, whatever the shuffle within the bound: each window is the next n
// of them.
func TestEventTimeCountWindowsInEventOrder(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds(16)) {
				r := rand.New(rand.NewPCG(seed, 35))
				bound := time.Duration(r.Int64N(int64(3*time.Minute))) + time.Second
				sorted := genItems(r, 1+r.IntN(100), 1+r.IntN(3), 10*time.Minute)
				items := shuffleWithin(r, sorted, bound)
				n := 1 + r.IntN(5)
				got, lateItems, st := runEventWindows(t, m.opts, items, pipeline.CountWindow(n), bound, 0)
				require.Len(t, lateItems, 0)
				assert.Equal(t, int64(0), st.Late)
				want := map[int][]winSum{}
				byKey := map[int][]ev{}
				for _, e := range sorted {
					byKey[e.Key] = append(byKey[e.Key], e)
				}
				for k, es := range byKey {
					for c := range slices.Chunk(es, n) {
						s := winSum{count: len(c)}
						for _, e := range c {
							s.value += e.V
						}
						want[k] = append(want[k], s)
					}
				}
				gotBy := map[int][]winSum{}
				for _, w := range got {
					gotBy[w.Key] = append(gotBy[w.Key], winSum{w.Count, w.Value})
					assert.Equal(t, w.Count < n, w.Partial, "seed %d: only a short last window is Partial", seed)
				}
				assert.Equal(t, want, gotBy, "seed %d", seed)
			}
		})
	}
}

// Without a Late output, late items go to the dead-letter sink with an
// error matching ErrLate that says how late they were, and a tracked late
// item ends DeadLettered; the counts add up.
func TestEventTimeLateItemsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			items := []ev{
				{ID: 0, V: 1, At: epoch.Add(10 * time.Minute)},
				{ID: 1, V: 2, At: epoch.Add(11 * time.Minute)},
				{ID: 2, V: 4, At: epoch.Add(time.Minute)}, // 9 min behind the watermark
				{ID: 3, V: 8, At: epoch.Add(10*time.Minute + time.Second)},
				{ID: 4, V: 16, At: epoch.Add(12*time.Minute + 30*time.Second)}, // the watermark to 11:30
				{ID: 5, V: 32, At: epoch},
			}
			dlq := deadletter.NewMemory(10)
			b := pipeline.New("et", append([]pipeline.Option{pipeline.WithDeadLetter(dlq)}, m.opts...)...)
			src := pipelinetest.NewTrackedSource(items...)
			wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
				pipeline.EventTime(evAt, time.Minute, 0))
			col := &pipelinetest.Collector[pipeline.Window[int, int]]{}
			pipeline.Sink(b, "store", wins, col)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			envs := dlq.Envelopes()
			require.Len(t, envs, 2)
			for i, id := range []int{2, 5} {
				assert.Equal(t, id, envs[i].Item.(ev).ID)
				assert.ErrorIs(t, envs[i].Err, pipeline.ErrLate)
				var le *pipeline.LateError
				require.ErrorAs(t, envs[i].Err, &le)
				assert.Equal(t, items[id].At, le.EventTime)
				assert.Equal(t, []time.Time{epoch.Add(10 * time.Minute), epoch.Add(11*time.Minute + 30*time.Second)}[i], le.Watermark)
				assert.Equal(t, "sum", envs[i].OriginNode)
			}
			st := nodeOf(t, res, "sum")
			assert.Equal(t, int64(2), st.Late)
			assert.Equal(t, int64(2), st.DeadLettered)
			outcomes := src.Outcomes()
			require.Len(t, outcomes, len(items))
			for id, want := range map[int]node.Outcome{0: node.Delivered, 1: node.Delivered, 2: node.DeadLettered, 3: node.Delivered, 4: node.Delivered, 5: node.DeadLettered} {
				assert.Equal(t, []node.Outcome{want}, outcomes[id], "item %d", id)
			}
			got := col.Items()
			slices.SortFunc(got, func(a, b pipeline.Window[int, int]) int { return cmp.Compare(a.Start.UnixNano(), b.Start.UnixNano()) })
			require.Len(t, got, 3)
			// The watermark passed 10:00's end: complete.
			assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(10 * time.Minute), End: epoch.Add(11 * time.Minute), Count: 2, Value: 9}, got[0])
			// It never passed the later ones': handed on at the end, Partial.
			assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(11 * time.Minute), End: epoch.Add(12 * time.Minute), Count: 1, Value: 2, Partial: true}, got[1])
			assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(12 * time.Minute), End: epoch.Add(13 * time.Minute), Count: 1, Value: 16, Partial: true}, got[2])
		})
	}
}
