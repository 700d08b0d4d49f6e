package pipeline_test

import (
	"context"
	"fmt"
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
)

// wmCrash is a run that dies, as with SIGKILL, right after the first
// checkpoint save of the position kill, and the run resumed from that
// checkpoint. The item at index i has the position i+1; the Aggregate
// "sum" takes them on event time, maxLateness bound, with a Late output.
type wmCrash struct {
	items []ev
	spec  pipeline.WindowSpec
	bound time.Duration
	// holdLate is the ID of a late item whose write to the Late output
	// waits for the death (-1: none): it holds the position back.
	holdLate int
	// gate is the start of a window whose write waits until the
	// Aggregate took every item (zero: none), so that the save its
	// write makes due comes after them.
	gate time.Time
	kill string

	// Filled by run: what each run wrote, the windows of the saved log
	// at the death, and the checkpoint then.
	first, again []pipeline.Window[int, int]
	lateFirst    []int
	lateAgain    []int
	saved        []byte
	res          pipeline.Result
}

// wmStore is a checkpoint store that stops saving once its run died.
type wmStore struct {
	*checkpoint.Memory
	mu   sync.Mutex
	kill string
	dead bool
	died chan struct{}
	last []byte
}

func (s *wmStore) Save(ctx context.Context, pipe, src string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return nil
	}
	if err := s.Memory.Save(ctx, pipe, src, data); err != nil {
		return err
	}
	pos, _, err := pipeline.DecodeSavedPosition(data)
	if err != nil {
		return err
	}
	if s.kill != "" && string(pos) == s.kill {
		s.dead, s.last = true, data
		close(s.died)
	}
	return nil
}

func (s *wmStore) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// pipe builds the pipeline of one run; the sinks record unless store
// died.
func (c *wmCrash) pipe(t *testing.T, clock *clockwork.FakeClock, store *wmStore, ctx context.Context, took func() bool, wins *[]pipeline.Window[int, int], late *[]int) *pipeline.Pipeline {
	var mu sync.Mutex
	b := pipeline.New("wl", pipeline.WithClock(clock), pipeline.WithCheckpoint(store, time.Second))
	var lateS pipeline.Stream[ev]
	src := &holdingSource{logSource: logSource{items: c.items}, hold: took != nil}
	out := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, c.spec, evZero, evSum,
		pipeline.EventTime(evAt, c.bound, 0), pipeline.Late(&lateS))
	pipeline.Sink(b, "store", out, node.SinkFunc[pipeline.Window[int, int]](func(ctx context.Context, w pipeline.Window[int, int]) error {
		if !c.gate.IsZero() && w.Start.Equal(c.gate) && took != nil {
			for !took() {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				runtimeGosched()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if !store.isDead() {
			*wins = append(*wins, w)
		}
		return nil
	}))
	pipeline.Sink(b, "late", lateS, node.SinkFunc[ev](func(ctx context.Context, e ev) error {
		if e.ID == c.holdLate && took != nil {
			<-ctx.Done()
			return ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		if !store.isDead() {
			*late = append(*late, e.ID)
		}
		return nil
	}))
	return build(t, b)
}

// holdingSource is logSource that, if hold, waits for the run's end
// after its items: the first run dies before its input ends.
type holdingSource struct {
	logSource
	hold bool
}

func (s *holdingSource) Run(ctx context.Context, emit node.Emitter[ev]) error {
	if err := s.logSource.Run(ctx, emit); err != nil || !s.hold {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// run runs the first run until it dies, then the resumed run to its end.
func (c *wmCrash) run(t *testing.T) {
	t.Helper()
	mem := checkpoint.NewMemory()
	store := &wmStore{Memory: mem, kill: c.kill, died: make(chan struct{})}
	clock := clockwork.NewFakeClock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var p *pipeline.Pipeline
	took := func() bool {
		s, _ := p.Stats().Node("sum")
		return s.In == int64(len(c.items))
	}
	p = c.pipe(t, clock, store, ctx, took, &c.first, &c.lateFirst)
	done := make(chan error, 1)
	go func() { _, err := p.Run(ctx); done <- err }()
	// The saver saves on its ticker: move the clock until the save of
	// the position kill (no wait on the real clock).
	for i := 0; ; i++ {
		require.Less(t, i, 1000000, "no save of position %s", c.kill)
		if store.isDead() {
			break
		}
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(time.Second)
		runtimeGosched()
	}
	cancel()
	<-done
	c.saved = store.last

	// Resumed from the checkpoint the dead run left.
	again := &wmStore{Memory: mem}
	var err error
	c.res, err = c.pipe(t, clockwork.NewFakeClock(), again, t.Context(), nil, &c.again, &c.lateAgain).Run(t.Context())
	require.NoError(t, err)
}

// sums returns the windows as "start count/value" (start as mm:ss of
// the hour), Partial ones marked, sorted.
func sums(ws []pipeline.Window[int, int]) []string {
	var out []string
	for _, w := range ws {
		s := fmt.Sprintf("%s %d/%d", w.Start.Format("04:05"), w.Count, w.Value)
		if w.Partial {
			s += " partial"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// An item that was late before a crash is late again after it: the
// resumed run's watermark starts at the one saved. Before the watermark
// was saved, the resumed run started its watermark again from the items
// it read, the item was on time there, and reopened a window the log had
// pruned: the window was handed on a second time, holding only that item
// (a wrong total, over the right one), and the item was handled twice.
func TestWindowLogLateItemIsLateAgainAfterACrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		spec pipeline.WindowSpec
		// first and again: the windows the two runs write.
		first, again []string
	}{
		{"tumbling", pipeline.TimeWindow(time.Minute),
			[]string{"00:00 1/1", "02:00 1/2"},
			[]string{"05:00 1/8 partial"}},
		{"sliding", pipeline.SlidingWindow(2*time.Minute, time.Minute),
			[]string{"00:00 1/1", "01:00 1/2", "02:00 1/2", "59:00 1/1"},
			[]string{"04:00 1/8 partial", "05:00 1/8 partial"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &wmCrash{
				items: []ev{
					at(0, 1, 10*time.Second),  // [0:00, 1:00)
					at(1, 2, 150*time.Second), // watermark 1:30: [0:00, 1:00) is written
					at(2, 4, 20*time.Second),  // late; its write waits: the position stays at 2
					at(3, 8, 5*time.Minute),   // watermark 4:00: the windows of item 1 are written
				},
				spec: tc.spec, bound: time.Minute, holdLate: 2, kill: "2",
			}
			c.run(t)
			assert.Equal(t, tc.first, sums(c.first))
			wms, err := pipeline.SavedWatermarks(c.saved)
			require.NoError(t, err)
			assert.Equal(t, map[string]time.Time{"sum": epoch.Add(90 * time.Second)}, wms,
				"the watermark item 2, the first after the position, was taken with; not 4:00, the node's at the save")
			assert.Equal(t, tc.again, sums(c.again), "no window written before the crash is written again")
			assert.Equal(t, []int{2}, c.lateAgain, "item 2 is late again")
			st := nodeOf(t, c.res, "sum")
			assert.Equal(t, int64(1), st.Late)
			assert.Equal(t, int64(0), st.Filtered)
		})
	}
}

// A replayed item that was on time before the crash is not made late by
// the watermark restored. The node's watermark at the save (2:30) was
// moved past item 1 (2:00) by items after the position, which the
// resumed run reads again: a watermark saved from there would make item
// 1 late, and rebuild its window [2:00, 3:00) without it. The one saved
// is that item 1 was taken with.
func TestWindowLogReplayedOnTimeItemStaysOnTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		spec         pipeline.WindowSpec
		gate         time.Time
		first, again []string
	}{
		{"tumbling", pipeline.TimeWindow(time.Minute), epoch,
			[]string{"00:00 1/1"},
			[]string{"02:00 2/6 partial", "03:00 1/8 partial"}},
		{"sliding", pipeline.SlidingWindow(2*time.Minute, time.Minute), epoch.Add(-time.Minute),
			[]string{"00:00 1/1", "59:00 1/1"},
			[]string{"01:00 2/6 partial", "02:00 3/14 partial", "03:00 1/8 partial"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &wmCrash{
				items: []ev{
					at(0, 1, 10*time.Second), // [0:00, 1:00)
					at(1, 2, 2*time.Minute),  // watermark 1:00: [0:00, 1:00) is written
					at(2, 4, 160*time.Second),
					at(3, 8, 210*time.Second), // watermark 2:30, past item 1
				},
				spec: tc.spec, bound: time.Minute, holdLate: -1, kill: "1",
				gate: tc.gate, // the save of position 1 comes after item 3 was taken
			}
			c.run(t)
			assert.Equal(t, tc.first, sums(c.first))
			wms, err := pipeline.SavedWatermarks(c.saved)
			require.NoError(t, err)
			assert.Equal(t, map[string]time.Time{"sum": epoch.Add(-50 * time.Second)}, wms, "the watermark item 1 was taken with")
			assert.Equal(t, tc.again, sums(c.again), "the windows of items 1 to 3 whole")
			assert.Empty(t, c.lateAgain)
			assert.Empty(t, c.lateFirst)
			st := nodeOf(t, c.res, "sum")
			assert.Equal(t, int64(0), st.Late)
		})
	}
}

// A position envelope written before watermarks were saved (format
// version 1 without "watermarks") still loads: the run resumes from its
// position, with its windows, and no watermark; its next save has one.
func TestWindowLogLoadsAnEnvelopeWithoutWatermark(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	// As the version before wrote it: position "2", window [0:00, 1:00)
	// of key 0 written.
	old := "\x00sluice.position\x00" + `{"v":1,"pos":"Mg==","windows":{"sum":[{"key":0,"start":` +
		strconv.FormatInt(epoch.UnixNano(), 10) + `,"end":` + strconv.FormatInt(epoch.Add(time.Minute).UnixNano(), 10) + `}]}}`
	require.NoError(t, store.Save(t.Context(), "wl", "src", []byte(old)))
	wms, err := pipeline.SavedWatermarks([]byte(old))
	require.NoError(t, err)
	assert.Empty(t, wms)
	src := &logSource{items: logItems}
	res, got, err := runLogged(t, store, src, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []byte("2"), src.resumed)
	assert.Equal(t, []string{"01:00 2/24", "03:00 1/32 partial"}, sums(got))
	assert.Equal(t, int64(1), nodeOf(t, res, "sum").Filtered, "item 2 falls in the window written")
	data, err := store.Load(t.Context(), "wl", "src")
	require.NoError(t, err)
	pos, _ := saved(t, store)
	assert.Equal(t, []byte("6"), pos)
	wms, err = pipeline.SavedWatermarks(data)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Time{"sum": epoch.Add(3 * time.Minute)}, wms)
}

// A watermark is restored per Aggregate, by name: two event-time
// Aggregates of one source each start from their own.
func TestWindowLogWatermarkPerAggregate(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	// Saved: "fast" (maxLateness 0) at 3:00, "slow" (maxLateness 2
	// minutes) at 1:00. Item 0:30 is late for the first only.
	env, err := pipeline.EncodeSavedPositionAt([]byte("0"), "fast", time.Minute, nil, nil,
		map[string]time.Time{"fast": epoch.Add(3 * time.Minute), "slow": epoch.Add(time.Minute)})
	require.NoError(t, err)
	require.NoError(t, store.Save(t.Context(), "wl", "src", env))

	b := pipeline.New("wl", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithCheckpoint(store, time.Hour))
	in := pipeline.Source(b, "src", &logSource{items: []ev{at(0, 1, 90*time.Second), at(1, 2, 30*time.Second)}})
	var late [2]pipeline.Stream[ev]
	var lates [2]*winSinkEv
	for i, n := range []string{"fast", "slow"} {
		bound := time.Duration(i) * 2 * time.Minute
		pipeline.Sink(b, n+"-out", pipeline.Aggregate(b, n, in, evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
			pipeline.EventTime(evAt, bound, 0), pipeline.Late(&late[i])), &winSink{})
		lates[i] = &winSinkEv{}
		pipeline.Sink(b, n+"-late", late[i], lates[i])
	}
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(2), nodeOf(t, res, "fast").Late, "both items are behind 3:00")
	assert.Equal(t, int64(1), nodeOf(t, res, "slow").Late, "only 0:30 is behind 1:00")
	assert.Equal(t, []int{0, 1}, lates[0].ids())
	assert.Equal(t, []int{1}, lates[1].ids())
	data, err := store.Load(t.Context(), "wl", "src")
	require.NoError(t, err)
	wms, err := pipeline.SavedWatermarks(data)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Time{"fast": epoch.Add(3 * time.Minute), "slow": epoch.Add(time.Minute)}, wms, "never lower than restored")
}

// winSinkEv keeps the IDs of the items it is given.
type winSinkEv struct {
	mu  sync.Mutex
	got []int
}

func (s *winSinkEv) Write(_ context.Context, e ev) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, e.ID)
	return nil
}

func (s *winSinkEv) ids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.got...)
}
