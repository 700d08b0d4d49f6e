package pipeline_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// sessionRef is a key's sessions recomputed from its items sorted by
// time: a new one starts where an item comes gap or more after the last.
type sessionRef struct {
	start, end   time.Time
	count, value int
}

func referenceSessions(sorted []ev, gap time.Duration) map[int][]sessionRef {
	out := map[int][]sessionRef{}
	for _, e := range sorted {
		s := out[e.Key]
		if n := len(s); n > 0 && e.At.Before(s[n-1].end) {
			s[n-1].end = e.At.Add(gap)
			s[n-1].count++
			s[n-1].value += e.V
			continue
		}
		out[e.Key] = append(s, sessionRef{start: e.At, end: e.At.Add(gap), count: 1, value: e.V})
	}
	return out
}

// Event-time sessions match a recomputation over the items sorted by
// time, for any shuffle within the lateness bound: items that bridge two
// sessions join them.
func TestSessionWindowsEventTimeShuffled(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds(16)) {
				r := rand.New(rand.NewPCG(seed, 36))
				gap := time.Duration(1+r.IntN(60)) * time.Second
				bound := time.Duration(r.Int64N(int64(2*time.Minute))) + time.Second
				sorted := genItems(r, 1+r.IntN(120), 1+r.IntN(3), 20*time.Minute)
				items := shuffleWithin(r, sorted, bound)
				got, late, st := runEventWindows(t, m.opts, items, pipeline.SessionWindow(gap), bound, 0)
				require.Len(t, late, 0)
				assert.Equal(t, int64(0), st.Late)
				gotBy := map[int][]sessionRef{}
				for _, w := range got {
					gotBy[w.Key] = append(gotBy[w.Key], sessionRef{w.Start, w.End, w.Count, w.Value})
				}
				for k := range gotBy {
					slices.SortFunc(gotBy[k], func(a, b sessionRef) int { return a.start.Compare(b.start) })
				}
				assert.Equal(t, referenceSessions(sorted, gap), gotBy, "seed %d", seed)
			}
		})
	}
}

// A session on the pipeline's clock closes gap after its key's last item
// arrived, while the input is open; each key has its own.
func TestSessionWindowsArrivalTime(t *testing.T) {
	t.Parallel()
	for range 10 {
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		clock := clockwork.NewFakeClockAt(start)
		f := &evFeed{items: make(chan ev)}
		b := pipeline.New("sess", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
		wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", f), evKey, pipeline.SessionWindow(5*time.Second), evZero, evSum)
		log := &windowLog{}
		pipeline.ForEach(b, "store", wins, log.write)
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		f.items <- ev{Key: 1, V: 1}
		taken(p, "sum", 1)
		clock.Advance(3 * time.Second)
		f.items <- ev{Key: 1, V: 2}
		f.items <- ev{Key: 2, V: 10}
		taken(p, "sum", 3)
		clock.Advance(4 * time.Second) // 7 s: key 1's session is quiet for 4 s, open
		assert.Equal(t, 0, log.len())
		clock.Advance(time.Second) // 8 s: key 1's closes, at 3 s + 5 s, and key 2's with it
		w := log.wait(2)
		assert.Equal(t, pipeline.Window[int, int]{Key: 1, Start: start, End: start.Add(8 * time.Second), Count: 2, Value: 3}, w[0])
		assert.Equal(t, pipeline.Window[int, int]{Key: 2, Start: start.Add(3 * time.Second), End: start.Add(8 * time.Second), Count: 1, Value: 10}, w[1])
		f.items <- ev{Key: 1, V: 4}
		taken(p, "sum", 4)
		close(f.items)
		_, err := run.Wait()
		require.NoError(t, err)
		w = log.wait(3)
		assert.Equal(t, pipeline.Window[int, int]{Key: 1, Start: start.Add(8 * time.Second), End: start.Add(13 * time.Second), Count: 1, Value: 4, Partial: true}, w[2])
	}
}

// An event-time session item behind the watermark is late, like any
// window's; one that bridges two open sessions joins them, its value
// added again from init.
func TestSessionWindowsLateAndBridge(t *testing.T) {
	t.Parallel()
	items := []ev{
		{ID: 0, V: 1, At: epoch.Add(10 * time.Minute)},
		{ID: 1, V: 2, At: epoch.Add(16 * time.Minute)}, // 6 min after: a session of its own
		{ID: 2, V: 4, At: epoch.Add(13 * time.Minute)}, // within 5 min of both: one session
		{ID: 3, V: 8, At: epoch.Add(time.Minute)},      // behind the watermark (16 min − 5)
	}
	got, late, st := runEventWindows(t, nil, items, pipeline.SessionWindow(5*time.Minute), 5*time.Minute, 0)
	assert.Equal(t, []ev{items[3]}, late)
	assert.Equal(t, int64(1), st.Late)
	assert.Equal(t, []pipeline.Window[int, int]{{Start: epoch.Add(10 * time.Minute), End: epoch.Add(21 * time.Minute), Count: 3, Value: 7, Partial: true}}, got)
}
