package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// logSource emits its items with EmitAt, the position of item i being
// i+1, and resumes after a position; resumed is the position it was
// given. With open set, it then calls open and waits for its context: an
// input that goes on.
type logSource struct {
	items   []ev
	from    int
	resumed []byte
	open    func()
}

func (s *logSource) Resume(pos []byte) error {
	s.from, s.resumed = 0, pos
	if pos != nil {
		n, err := strconv.Atoi(string(pos))
		if err != nil {
			return err
		}
		s.from = n
	}
	return nil
}

func (s *logSource) Run(ctx context.Context, emit node.Emitter[ev]) error {
	for i := s.from; i < len(s.items); i++ {
		if err := emit.EmitAt(ctx, s.items[i], []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
	}
	if s.open != nil {
		s.open()
		<-ctx.Done()
	}
	return nil
}

// winSink keeps every window it is given, in order.
type winSink struct {
	mu   sync.Mutex
	wins []pipeline.Window[int, int]
}

func (s *winSink) Write(_ context.Context, w pipeline.Window[int, int]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wins = append(s.wins, w)
	return nil
}

func (s *winSink) got() []pipeline.Window[int, int] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pipeline.Window[int, int](nil), s.wins...)
}

// countingStore counts its saves.
type countingStore struct {
	checkpoint.Store
	saves int
}

func (s *countingStore) Save(ctx context.Context, pipe, src string, pos []byte) error {
	s.saves++
	return s.Store.Save(ctx, pipe, src, pos)
}

// runLogged runs items through an event-time Aggregate of one-minute
// windows (maxLateness 0) under a checkpoint in store, saved only at the
// run's end (the fake clock never moves), and returns the run's result
// and the windows written.
func runLogged(t *testing.T, store checkpoint.Store, src *logSource, spec pipeline.WindowSpec) (pipeline.Result, []pipeline.Window[int, int], error) {
	t.Helper()
	b := pipeline.New("wl", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithCheckpoint(store, time.Hour))
	var late pipeline.Stream[ev]
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, spec, evZero, evSum,
		pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late))
	sink := &winSink{}
	pipeline.Sink(b, "store", wins, sink)
	pipeline.Sink(b, "late", late, node.SinkFunc[ev](func(context.Context, ev) error { return errors.New("no item is late here") }))
	res, err := build(t, b).Run(t.Context())
	return res, sink.got(), err
}

// saved returns the position and windows the store holds for the test
// pipeline's source.
func saved(t *testing.T, store checkpoint.Store) ([]byte, []string) {
	t.Helper()
	data, err := store.Load(t.Context(), "wl", "src")
	require.NoError(t, err)
	pos, wins, err := pipeline.DecodeSavedPosition(data)
	require.NoError(t, err)
	return pos, wins
}

// at returns an item of key 0 and value v at epoch + d.
func at(id, v int, d time.Duration) ev { return ev{ID: id, V: v, At: epoch.Add(d)} }

// Items of the test: the window [0:00, 1:00) has three, [1:00, 2:00)
// two, and an item at 3:00 closes both.
var logItems = []ev{
	at(0, 1, 10*time.Second), at(1, 2, 20*time.Second), at(2, 4, 50*time.Second),
	at(3, 8, 70*time.Second), at(4, 16, 80*time.Second),
	at(5, 32, 3*time.Minute),
}

// A checkpoint saved before window logs (the source's bare position)
// still loads: the source resumes from it, and the next save is an
// envelope.
func TestWindowLogLoadsAnOldCheckpoint(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	require.NoError(t, store.Save(t.Context(), "wl", "src", []byte("3")))
	src := &logSource{items: logItems}
	_, got, err := runLogged(t, store, src, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []byte("3"), src.resumed)
	require.Len(t, got, 2)
	assert.Equal(t, 24, got[0].Value, "[1:00, 2:00) from items 3 and 4")
	assert.True(t, got[1].Partial, "[3:00, 4:00) at the end of input")
	data, err := store.Load(t.Context(), "wl", "src")
	require.NoError(t, err)
	assert.False(t, bytes.Equal([]byte("6"), data), "the next save is an envelope")
	pos, wins := saved(t, store)
	assert.Equal(t, []byte("6"), pos)
	assert.Empty(t, wins, "at a clean end every written window is before the position, and the Partial one is not recorded")
}

// A position envelope that does not parse, or of a format version this
// version does not read, fails the run before any node starts, with an
// error naming the source; a corrupt watermark names its Aggregate too.
func TestWindowLogCorruptEnvelope(t *testing.T) {
	t.Parallel()
	good, err := pipeline.EncodeSavedPosition([]byte("2"), "sum", time.Minute, []string{"0"}, []time.Time{epoch})
	require.NoError(t, err)
	goodWM, err := pipeline.EncodeSavedPositionAt([]byte("2"), "sum", time.Minute, []string{"0"}, []time.Time{epoch}, map[string]time.Time{"sum": epoch})
	require.NoError(t, err)
	require.Contains(t, string(goodWM), `"watermarks":{"sum":{"s":1796083200,"ns":0}}`)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"torn", good[:len(good)-3], "the position envelope is corrupt"},
		{"version", bytes.Replace(good, []byte(`"v":1`), []byte(`"v":9`), 1), "format version 9"},
		{"key", bytes.Replace(good, []byte(`"key":0`), []byte(`"key":"x"`), 1), `Aggregate "sum": the checkpoint's window key "x" does not decode into int`},
		{"watermark", bytes.Replace(goodWM, []byte(`{"s":1796083200,"ns":0}`), []byte(`"x"`), 1), `the position envelope is corrupt: the watermark of Aggregate "sum", "x": json: cannot unmarshal`},
		{"watermark ns", bytes.Replace(goodWM, []byte(`"ns":0`), []byte(`"ns":1000000000`), 1), `the watermark of Aggregate "sum", {"s":1796083200,"ns":1000000000}: 1000000000 nanoseconds is out of range`},
		{"watermark s", bytes.Replace(goodWM, []byte(`"s":1796083200,`), nil, 1), `the watermark of Aggregate "sum", {"ns":0}: it needs both "s" and "ns"`},
		{"watermark s huge", bytes.Replace(goodWM, []byte(`"s":1796083200`), []byte(`"s":9223372036854775807`), 1), `the watermark of Aggregate "sum", {"s":9223372036854775807,"ns":0}: 9223372036854775807 seconds is out of range`},
		{"watermark s very negative", bytes.Replace(goodWM, []byte(`"s":1796083200`), []byte(`"s":-9223372036854775808`), 1), `-9223372036854775808 seconds is out of range`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := checkpoint.NewMemory()
			require.NoError(t, store.Save(t.Context(), "wl", "src", tc.data))
			res, got, err := runLogged(t, store, &logSource{items: logItems}, pipeline.TimeWindow(time.Minute))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var ne *pipeline.NodeError
			require.True(t, errors.As(err, &ne))
			if tc.name != "key" {
				assert.Equal(t, "src", ne.Node)
			} else {
				assert.Equal(t, "sum", ne.Node, "the key is the Aggregate's")
			}
			assert.Empty(t, got, "nothing written")
			assert.Equal(t, int64(0), nodeOf(t, res, "store").In)
			after, err := store.Load(t.Context(), "wl", "src")
			require.NoError(t, err)
			assert.Equal(t, tc.data, after, "the checkpoint is left as it was")
		})
	}
}

// Replayed items that fall in a window the checkpoint records as written
// settle Filtered: counted, not handed on, not dead-lettered, not late;
// the position moves past them.
func TestWindowLogReplayedItemsFiltered(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	env, err := pipeline.EncodeSavedPosition(nil, "sum", time.Minute, []string{"0"}, []time.Time{epoch})
	require.NoError(t, err)
	require.NoError(t, store.Save(t.Context(), "wl", "src", env))
	src := &logSource{items: logItems}
	res, got, err := runLogged(t, store, src, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	assert.Nil(t, src.resumed, "a save before any position committed holds none")
	require.Len(t, got, 2, "[0:00, 1:00) is not written again")
	assert.Equal(t, epoch.Add(time.Minute), got[0].Start)
	assert.Equal(t, 24, got[0].Value)
	st := nodeOf(t, res, "sum")
	assert.Equal(t, int64(3), st.Filtered, "the three items of [0:00, 1:00)")
	assert.Equal(t, int64(0), st.DeadLettered)
	assert.Equal(t, int64(0), st.Late)
	pos, wins := saved(t, store)
	assert.Equal(t, []byte("6"), pos)
	assert.Empty(t, wins, "pruned: the watermark passed the window and the position its items")
}

// On sliding windows an item falls in several windows: it is left out
// only of those written, and settles Filtered only when all were.
func TestWindowLogSlidingSkipsOnlyWrittenWindows(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	// [-1:00, 1:00) and [0:00, 2:00) were written; [1:00, 3:00) was not.
	env, err := pipeline.EncodeSavedPosition(nil, "sum", 2*time.Minute, []string{"0", "0"}, []time.Time{epoch.Add(-time.Minute), epoch})
	require.NoError(t, err)
	require.NoError(t, store.Save(t.Context(), "wl", "src", env))
	res, got, err := runLogged(t, store, &logSource{items: logItems}, pipeline.SlidingWindow(2*time.Minute, time.Minute))
	require.NoError(t, err)
	sums := map[time.Duration]int{}
	for _, w := range got {
		sums[w.Start.Sub(epoch)] = w.Value
	}
	assert.Equal(t, map[time.Duration]int{time.Minute: 24, 2 * time.Minute: 32, 3 * time.Minute: 32}, sums)
	assert.Equal(t, int64(3), nodeOf(t, res, "sum").Filtered, "the items of [0:00, 1:00) fall only in written windows")
	pos, _ := saved(t, store)
	assert.Equal(t, []byte("6"), pos, "every item settled")
}

// One item: its window is handed on at the end of input, Partial, and a
// Partial window is not recorded, nor are its items: the resumed run that
// reads input added later hands the window on again from the items added
// alone (docs/nodes.md says so).
func TestWindowLogOneItem(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	_, got, err := runLogged(t, store, &logSource{items: logItems[:1]}, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.True(t, got[0].Partial)
	pos, wins := saved(t, store)
	assert.Equal(t, []byte("1"), pos)
	assert.Empty(t, wins)
	data, err := store.Load(t.Context(), "wl", "src")
	require.NoError(t, err)
	wms, err := pipeline.SavedWatermarks(data)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Time{"sum": epoch.Add(10 * time.Second)}, wms, "the item's own time (maxLateness 0): it settled")
	// The input grew: the resumed run reads the rest, none late (0:20
	// and 0:50 are after the watermark restored).
	res, got, err := runLogged(t, store, &logSource{items: logItems}, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, 6, got[0].Value, "[0:00, 1:00) again, from the items added")
	assert.Equal(t, int64(0), nodeOf(t, res, "sum").Late)
}

// An empty run saves nothing, and leaves a saved envelope as it was.
func TestWindowLogEmptyRun(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: checkpoint.NewMemory()}
	_, got, err := runLogged(t, store, &logSource{}, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, 0, store.saves)
	env, err := pipeline.EncodeSavedPositionAt([]byte("6"), "sum", time.Minute, []string{"0"}, []time.Time{epoch.Add(10 * time.Minute)},
		map[string]time.Time{"sum": epoch.Add(11 * time.Minute)})
	require.NoError(t, err)
	require.NoError(t, store.Store.Save(t.Context(), "wl", "src", env))
	_, got, err = runLogged(t, store, &logSource{items: logItems}, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	assert.Empty(t, got, "resumed at the end")
	assert.Equal(t, 0, store.saves, "nothing moved")
	data, err := store.Load(t.Context(), "wl", "src")
	require.NoError(t, err)
	assert.Equal(t, env, data, "the envelope, its watermark with it, as it was")
}

// A crash before any save: the resumed run starts from the beginning and
// writes every window again, whole (a limit: a window written after the
// last save is written again).
func TestWindowLogCrashBeforeAnySave(t *testing.T) {
	t.Parallel()
	dead := &deadStore{}
	_, first, err := runLogged(t, dead, &logSource{items: logItems}, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	_, again, err := runLogged(t, dead.Memory, &logSource{items: logItems}, pipeline.TimeWindow(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, first, again, "every window again, whole")
}

// deadStore is a process that died before its first save: it loads from
// an empty store, and saves nowhere.
type deadStore struct{ *checkpoint.Memory }

func (d *deadStore) Load(ctx context.Context, pipe, src string) ([]byte, error) {
	if d.Memory == nil {
		d.Memory = checkpoint.NewMemory()
	}
	return d.Memory.Load(ctx, pipe, src)
}

func (d *deadStore) Save(context.Context, string, string, []byte) error { return nil }

// Build refuses a window key that does not round-trip through JSON when
// the node keeps a window log, naming the node and the field; without a
// window log (no checkpoint, an idle timeout, several sources) it does
// not.
func TestWindowLogRefusesKeysThatDoNotRoundTrip(t *testing.T) {
	t.Parallel()
	type hidden struct{ a int }
	type dropped struct {
		A int
		B int `json:"-"`
	}
	type fine struct {
		Region string
		Shard  [2]uint8
	}
	try := func(t *testing.T, opts []pipeline.Option, sources int, idle time.Duration, add func(*pipeline.Builder, pipeline.Stream[ev], ...pipeline.NodeOption)) error {
		b := pipeline.New("wl", opts...)
		in := pipeline.Source(b, "src", &logSource{})
		if sources > 1 {
			in = pipeline.Merge(b, "both", in, pipeline.Source(b, "src2", &logSource{}))
		}
		add(b, in, pipeline.EventTime(evAt, 0, idle))
		_, err := b.Build()
		return err
	}
	keyed := func(key any) func(*pipeline.Builder, pipeline.Stream[ev], ...pipeline.NodeOption) {
		return func(b *pipeline.Builder, in pipeline.Stream[ev], opts ...pipeline.NodeOption) {
			switch k := key.(type) {
			case func(ev) hidden:
				pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, k, pipeline.TimeWindow(time.Minute), evZero, evSum, opts...), node.SinkFunc[pipeline.Window[hidden, int]](func(context.Context, pipeline.Window[hidden, int]) error { return nil }))
			case func(ev) dropped:
				pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, k, pipeline.TimeWindow(time.Minute), evZero, evSum, opts...), node.SinkFunc[pipeline.Window[dropped, int]](func(context.Context, pipeline.Window[dropped, int]) error { return nil }))
			case func(ev) float64:
				pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, k, pipeline.TimeWindow(time.Minute), evZero, evSum, opts...), node.SinkFunc[pipeline.Window[float64, int]](func(context.Context, pipeline.Window[float64, int]) error { return nil }))
			case func(ev) time.Time:
				pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, k, pipeline.TimeWindow(time.Minute), evZero, evSum, opts...), node.SinkFunc[pipeline.Window[time.Time, int]](func(context.Context, pipeline.Window[time.Time, int]) error { return nil }))
			case func(ev) *int:
				pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, k, pipeline.TimeWindow(time.Minute), evZero, evSum, opts...), node.SinkFunc[pipeline.Window[*int, int]](func(context.Context, pipeline.Window[*int, int]) error { return nil }))
			case func(ev) fine:
				pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, k, pipeline.TimeWindow(time.Minute), evZero, evSum, opts...), node.SinkFunc[pipeline.Window[fine, int]](func(context.Context, pipeline.Window[fine, int]) error { return nil }))
			}
		}
	}
	cp := []pipeline.Option{pipeline.WithCheckpoint(checkpoint.NewMemory(), time.Second), pipeline.WithDeadLetter(deadletter.NewMemory(10))}
	for _, tc := range []struct {
		name string
		key  any
		want string
	}{
		{"unexported field", func(ev) hidden { return hidden{a: 1} }, "field a is unexported"},
		{"json:\"-\"", func(ev) dropped { return dropped{} }, "field B is tagged json:\"-\""},
		{"float", func(ev) float64 { return 0 }, "float64 does not round-trip through JSON"},
		{"time", func(ev) time.Time { return time.Time{} }, "use its UnixNano"},
		{"pointer", func(ev) *int { return nil }, "*int (a ptr) does not round-trip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := try(t, cp, 1, 0, keyed(tc.key))
			require.Error(t, err)
			var be *pipeline.BuildError
			require.True(t, errors.As(err, &be))
			assert.Equal(t, "sum", be.Node)
			assert.Contains(t, err.Error(), "Aggregate key")
			assert.Contains(t, err.Error(), tc.want)
			// No window log, no refusal.
			assert.NoError(t, try(t, []pipeline.Option{pipeline.WithDeadLetter(deadletter.NewMemory(10))}, 1, 0, keyed(tc.key)), "without a checkpoint")
			assert.NoError(t, try(t, cp, 1, time.Minute, keyed(tc.key)), "with an idle timeout")
			assert.NoError(t, try(t, cp, 2, 0, keyed(tc.key)), "with several sources")
		})
	}
	assert.NoError(t, try(t, cp, 1, 0, keyed(func(ev) fine { return fine{} })), "strings and arrays of numbers round-trip")
}

// plainSource emits its items with EmitAt, and does not resume.
type plainSource struct{ items []ev }

func (s plainSource) Run(ctx context.Context, emit node.Emitter[ev]) error {
	for i, e := range s.items {
		if err := emit.EmitAt(ctx, e, []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
	}
	return nil
}

// No window log is kept with two sources, nor with a source that does
// not resume: the saved positions are the sources' bare bytes, as
// before window logs.
func TestWindowLogNotKeptWithSeveralSourcesOrWithoutResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   func(*pipeline.Builder) pipeline.Stream[ev]
	}{
		{"two sources", func(b *pipeline.Builder) pipeline.Stream[ev] {
			return pipeline.Merge(b, "both", pipeline.Source(b, "src", &logSource{items: logItems}),
				pipeline.Source(b, "src2", &logSource{items: logItems[:2]}))
		}},
		{"no Resume", func(b *pipeline.Builder) pipeline.Stream[ev] {
			return pipeline.Source(b, "src", plainSource{items: logItems})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := checkpoint.NewMemory()
			b := pipeline.New("wl", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithCheckpoint(store, time.Hour),
				pipeline.WithDeadLetter(deadletter.NewMemory(10)))
			wins := pipeline.Aggregate(b, "sum", tc.in(b), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum, pipeline.EventTime(evAt, 0, 0))
			pipeline.Sink(b, "store", wins, &winSink{})
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			data, err := store.Load(t.Context(), "wl", "src")
			require.NoError(t, err)
			assert.Equal(t, []byte("6"), data, "the bare position")
		})
	}
}

// holdSource emits its items with EmitAt, then waits for the run's end.
type holdSource struct{ items []ev }

func (s holdSource) Resume([]byte) error { return nil }

func (s holdSource) Run(ctx context.Context, emit node.Emitter[ev]) error {
	for i, e := range s.items {
		if err := emit.EmitAt(ctx, e, []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// A window that settles while an older item holds the position moves no
// position, and is saved all the same: the log changed.
func TestWindowLogSavedWhenOnlyTheLogChanged(t *testing.T) {
	t.Parallel()
	items := []ev{
		{ID: 0, Key: 1, V: 1, At: epoch.Add(70 * time.Second)}, // [1:00, 2:00) of key 1 stays open
		{ID: 1, Key: 2, V: 2, At: epoch.Add(20 * time.Second)}, // [0:00, 1:00) of key 2
		{ID: 2, Key: 2, V: 4, At: epoch.Add(125 * time.Second)},
	}
	clock := clockwork.NewFakeClock()
	store := checkpoint.NewMemory()
	b := pipeline.New("wl", pipeline.WithClock(clock), pipeline.WithCheckpoint(store, time.Second), pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", holdSource{items: items}), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, time.Minute, 0))
	sink := &winSink{}
	pipeline.Sink(b, "store", wins, sink)
	p := build(t, b)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := p.Run(ctx); done <- err }()
	var got []string
	// The saver saves on its ticker once the window settled: move the
	// clock until it did (no wait on the real clock).
	for i := 0; i < 100000 && len(got) == 0; i++ {
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(time.Second)
		data, err := store.Load(t.Context(), "wl", "src")
		require.NoError(t, err)
		if data != nil {
			var pos []byte
			pos, got, err = pipeline.DecodeSavedPosition(data)
			require.NoError(t, err)
			assert.Nil(t, pos, "item 1 holds the position")
		}
		runtime.Gosched()
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, []string{"sum 2 " + strconv.FormatInt(epoch.UnixNano(), 10)}, got)
	require.Len(t, sink.got(), 1)
}
