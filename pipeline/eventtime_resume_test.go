package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// crashWorld is a process that dies (as with SIGKILL) right after the
// first checkpoint save that leaves a written window with items after
// the saved position: from then on nothing it does reaches the store or
// the sink.
// crashTries is how many runs a crash test tries for a crash right after
// a save that recorded written windows with items after its position.
// Which save that is depends on the goroutines' timing: measured over 240
// seeded runs without -race, a try succeeds about one time in 25 (median
// 18 tries, the most 151), under -race one in two (the most 9). A try
// takes well under a millisecond.
const crashTries = 2000

type crashWorld struct {
	mu      sync.Mutex
	store   *checkpoint.Memory
	items   []ev
	written map[winKey]bool   // windows written by the dead run
	upsert  map[winKey]winSum // the sink's table: the last copy wins
	copies  map[winKey]int
	saved   map[winKey]bool // the windows the dead run's last save recorded as written
	dead    bool
	lates   []int // the IDs of the late items, while not dead
	kill    context.CancelFunc
	clock   *clockwork.FakeClock
	savedAt int
	// partial: the run wrote a Partial window (the end of input's). The
	// crash comes before: a Partial window is not in the log, and one
	// whose items partly settled before the last save is rebuilt from the
	// rest alone (a documented limit, not what these tests look at).
	partial bool
}

// past reports whether a window written holds an item at index >= p,
// one a run resumed at p reads again.
func (w *crashWorld) past(p int) bool {
	for i := p; i < len(w.items); i++ {
		e := w.items[i]
		if w.written[winKey{e.Key, e.At.Truncate(crashWindow)}] {
			return true
		}
	}
	return false
}

type crashWorldStore struct{ w *crashWorld }

func (s crashWorldStore) Load(ctx context.Context, pipe, src string) ([]byte, error) {
	return s.w.store.Load(ctx, pipe, src)
}

func (s crashWorldStore) Save(ctx context.Context, pipe, src string, saved []byte) error {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return nil
	}
	if err := w.store.Save(ctx, pipe, src, saved); err != nil {
		return err
	}
	pos, wins, err := pipeline.DecodeSavedPosition(saved)
	if err != nil {
		return err
	}
	p, _ := strconv.Atoi(string(pos))
	if w.kill != nil && !w.partial && w.past(p) {
		w.dead, w.savedAt = true, p
		w.saved = map[winKey]bool{}
		for _, s := range wins {
			var k int
			var start int64
			if _, err := fmt.Sscanf(s, "sum %d %d", &k, &start); err != nil {
				return err
			}
			w.saved[winKey{k, time.Unix(0, start).UTC()}] = true
		}
		w.kill()
	}
	return nil
}

func (w *crashWorld) Write(_ context.Context, win pipeline.Window[int, int]) error {
	// The clock moves with each write too, so that a position is saved
	// after each window settled, once the source emitted all.
	w.clock.Advance(time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return nil
	}
	id := winKey{win.Key, win.Start}
	w.partial = w.partial || win.Partial
	w.upsert[id] = winSum{win.Count, win.Value}
	w.copies[id]++
	w.written[id] = true
	return nil
}

// tickingSource is crashSource that moves the fake clock by the
// checkpoint interval after each item, so that positions are saved all
// along the run.
type tickingSource struct {
	crashSource
	clock *clockwork.FakeClock
}

func (s *tickingSource) Run(ctx context.Context, emit node.Emitter[ev]) error {
	for i := s.from; i < len(s.items); i++ {
		if err := emit.EmitAt(ctx, s.items[i], []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
		s.clock.Advance(time.Millisecond)
	}
	return nil
}

func (w *crashWorld) run(t *testing.T, ctx context.Context) (pipeline.Result, error) {
	clock := clockwork.NewFakeClock()
	w.clock = clock
	b := pipeline.New("crash", pipeline.WithClock(clock), pipeline.WithCheckpoint(crashWorldStore{w}, time.Millisecond))
	var late pipeline.Stream[ev]
	src := &tickingSource{crashSource: crashSource{items: w.items, hold: -1}, clock: clock}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey,
		pipeline.TimeWindow(crashWindow), evZero, evSum, pipeline.EventTime(evAt, crashBound, 0), pipeline.Late(&late))
	pipeline.Sink(b, "store", wins, w)
	pipeline.Sink(b, "late", late, node.SinkFunc[ev](func(_ context.Context, e ev) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.dead {
			w.lates = append(w.lates, e.ID)
		}
		return nil
	}))
	return build(t, b).Run(ctx)
}

// After a crash right after a save (SIGKILL can hit at any moment), a
// written window that has items after the saved position is not handed
// on again: the save recorded it as written, and the resumed run settles
// the items it reads again of it as Filtered. Every copy of every window
// holds its whole total, so even a sink that keeps the last copy by Key
// and Start (an upsert) holds a recomputation; a window handed on twice
// is one written after the save, and not recorded in it. The crash is
// that of TestEventTimeWindowsSurviveSIGKILL, in one process: the run
// "dies" right after the first save that leaves a written window partly
// after the position, and nothing it does after reaches the store or the
// sink.
func TestEventTimeResumeDoesNotWriteSavedWindowsAgain(t *testing.T) {
	t.Parallel()
	items := crashItems()
	_, want := reference(items, crashWindow, crashWindow, crashBound, 0)
	// Where the positions are saved depends on the goroutines' timing:
	// try again until the crash came after a save that recorded written
	// windows (about half the tries under -race; without it, as few as one
	// in 25, so that 100 tries ran out in 1 seed of 8 about one run in
	// seven: crashTries).
	var w *crashWorld
	for try := 0; try < crashTries && (w == nil || len(w.saved) == 0); try++ {
		w = &crashWorld{store: checkpoint.NewMemory(), items: items, written: map[winKey]bool{},
			upsert: map[winKey]winSum{}, copies: map[winKey]int{}}
		ctx, cancel := context.WithCancel(t.Context())
		w.kill = cancel
		_, _ = w.run(t, ctx) // killed: its error is of no interest
		cancel()
		w.mu.Lock()
		w.dead, w.kill = false, nil
		w.mu.Unlock()
	}
	require.NotEmpty(t, w.saved, "the first run died right after a save that recorded written windows with items after its position")
	res, err := w.run(t, t.Context())
	require.NoError(t, err)
	assert.Equal(t, want, w.upsert, "every window written, every copy whole: the last copies are a recomputation")
	again := 0
	for id, n := range w.copies {
		if w.saved[id] {
			assert.Equal(t, 1, n, "window %d %s: recorded as written by the save before the crash, written once", id.key, id.start.Format(time.TimeOnly))
		}
		if n > 1 {
			again++
		}
	}
	st := nodeOf(t, res, "sum")
	assert.Greater(t, st.Filtered, int64(0), "the items read again of the recorded windows settle Filtered")
	assert.Equal(t, int64(0), st.DeadLettered)
	t.Logf("crash at position %d; %d windows recorded as written; %d items filtered on resume; %d windows written twice (after the save)",
		w.savedAt, len(w.saved), st.Filtered, again)
}

// The crash of TestEventTimeResumeDoesNotWriteSavedWindowsAgain on an
// input with late items (a quarter of the items held back by up to four
// times maxLateness), for several seeds: the resumed run's watermark
// starts at the one saved, so the items it reads again that were late are
// late again, and none reopens a window the log dropped. Every window's
// last copy is a recomputation (the items in order, late ones left out),
// and the late items of the resumed run are exactly those of the
// recomputation after the saved position. Without the saved watermark a
// late item reopened a window the save had dropped, and that window's
// last copy held only the items read again.
func TestEventTimeResumeKeepsLateItemsLate(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 71))
			items := genItems(r, 160, 3, 40*time.Minute)
			for i := range items {
				if r.IntN(4) == 0 {
					items[i].At = items[i].At.Add(-time.Duration(r.Int64N(int64(4 * crashBound))))
				}
			}
			late, want := reference(items, crashWindow, crashWindow, crashBound, 0)
			var w *crashWorld
			for try := 0; try < crashTries && (w == nil || len(w.saved) == 0); try++ {
				w = &crashWorld{store: checkpoint.NewMemory(), items: items, written: map[winKey]bool{},
					upsert: map[winKey]winSum{}, copies: map[winKey]int{}}
				ctx, cancel := context.WithCancel(t.Context())
				w.kill = cancel
				_, _ = w.run(t, ctx)
				cancel()
				w.mu.Lock()
				w.dead, w.kill, w.lates = false, nil, nil
				w.mu.Unlock()
			}
			require.NotEmpty(t, w.saved, "the first run died right after a save that recorded written windows with items after its position")
			res, err := w.run(t, t.Context())
			require.NoError(t, err)
			assert.Equal(t, want, w.upsert, "every window's last copy is a recomputation")
			var wantLate []int
			for i, e := range items {
				if i >= w.savedAt && late[e.ID] {
					wantLate = append(wantLate, e.ID)
				}
			}
			slices.Sort(w.lates)
			slices.Sort(wantLate)
			assert.Equal(t, wantLate, w.lates, "the items read again that were late are late again, and only they")
			for id, n := range w.copies {
				if w.saved[id] {
					assert.Equal(t, 1, n, "window %d %s: recorded as written by the save before the crash, written once", id.key, id.start.Format(time.TimeOnly))
				}
			}
			assert.Equal(t, int64(len(wantLate)), nodeOf(t, res, "sum").Late)
			t.Logf("crash at position %d; %d late items read again", w.savedAt, len(wantLate))
		})
	}
}

// firstCopySink keeps the first copy of each window by Key and Start
// (insert if absent) and never replaces it, the rule that is right across
// a crash without AllowedLateness or the idle timeout.
type firstCopySink struct {
	mu   sync.Mutex
	got  map[winKey]winSum
	last map[winKey]winSum // the last copy, to compare
}

func (s *firstCopySink) Write(_ context.Context, w pipeline.Window[int, int]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := winKey{w.Key, w.Start}
	s.last[id] = winSum{w.Count, w.Value}
	if _, ok := s.got[id]; !ok {
		s.got[id] = winSum{w.Count, w.Value}
	}
	return nil
}

// The other half of the limitation: with AllowedLateness a window is
// handed on again as an Update with its whole total, so the first copy is
// not the complete one, and a sink that keeps the first copy (right after a
// crash, above) keeps a window's first total and drops its updates, while
// the last copy is right. No sink rule is right both across a crash and
// with updates (or the idle timeout's Partial windows, completed later:
// TestEventTimeIdleWindowCompletesOnTheWatermark). The items are those of
// TestEventTimeAllowedLatenessUpdates.
func TestEventTimeKeepFirstCopyDropsUpdates(t *testing.T) {
	t.Parallel()
	items := []ev{
		{ID: 0, V: 1, At: epoch.Add(10 * time.Second)},
		{ID: 1, V: 2, At: epoch.Add(65 * time.Second)}, // [0:00, 1:00) fires
		{ID: 2, V: 4, At: epoch.Add(20 * time.Second)}, // an update
		{ID: 3, V: 8, At: epoch.Add(30 * time.Second)}, // another update
		{ID: 4, V: 16, At: epoch.Add(3 * time.Minute)},
	}
	_, want := reference(items, time.Minute, time.Minute, 0, time.Minute)
	b := pipeline.New("et", pipeline.WithHandOverBatch(1))
	var late pipeline.Stream[ev]
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewTrackedSource(items...)), evKey,
		pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0), pipeline.AllowedLateness(time.Minute), pipeline.Late(&late))
	sink := &firstCopySink{got: map[winKey]winSum{}, last: map[winKey]winSum{}}
	pipeline.Sink(b, "store", wins, sink)
	pipeline.Sink(b, "late", late, &pipelinetest.Collector[ev]{})
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, want, sink.last, "the last copies are a recomputation")
	first := winKey{0, epoch}
	assert.Equal(t, winSum{1, 1}, sink.got[first], "the first copy of [0:00, 1:00) is its first total")
	assert.Equal(t, winSum{3, 13}, want[first], "its whole total")
}
