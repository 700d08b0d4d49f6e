package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// The event-time crash test runs its own test binary as a child that
// aggregates crashItems under a checkpoint file in $SLUICE_EVENTTIME_CRASH_DIR,
// appending every window it writes to a file there, tagged with
// $SLUICE_EVENTTIME_CRASH_RUN, and holds where $SLUICE_EVENTTIME_CRASH_STOP
// says, to be killed.
const (
	etCrashDirEnv  = "SLUICE_EVENTTIME_CRASH_DIR"
	etCrashStopEnv = "SLUICE_EVENTTIME_CRASH_STOP"
	etCrashRunEnv  = "SLUICE_EVENTTIME_CRASH_RUN"
)

// crashWindow is the window of the crash test, and crashBound the
// disorder of its input, which is also the watermark's maxLateness: no
// item is late, so every run, resumed anywhere, puts each item in the
// same window.
const (
	crashWindow = 5 * time.Minute
	crashBound  = 2 * time.Minute
)

// crashItems are the crash test's input: 240 items of 3 keys over an hour,
// shuffled within crashBound; the same in the test and in its child.
func crashItems() []ev {
	r := rand.New(rand.NewPCG(7, 33))
	return shuffleWithin(r, genItems(r, 240, 3, time.Hour), crashBound)
}

// crashSource emits crashItems with EmitAt, the position of item i being
// i+1, and resumes after a position. With hold >= 0 it prints "holding"
// once it emitted hold items after the one it resumed at, and waits for
// the run's end (or the kill).
type crashSource struct {
	items []ev
	from  int
	hold  int
	// tell, when set, is told the position the source resumed at (the
	// child's stdout, which its parent reads); nil in-process.
	tell io.Writer
}

func (s *crashSource) Resume(pos []byte) error {
	s.from = 0
	if pos != nil {
		n, err := strconv.Atoi(string(pos))
		if err != nil {
			return err
		}
		s.from = n
	}
	if s.tell != nil {
		fmt.Fprintf(s.tell, "from %d\n", s.from)
	}
	return nil
}

func (s *crashSource) Run(ctx context.Context, emit node.Emitter[ev]) error {
	for i := s.from; i < len(s.items); i++ {
		if err := emit.EmitAt(ctx, s.items[i], []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
		if i == s.from+s.hold {
			fmt.Println("holding")
			<-ctx.Done()
			return ctx.Err()
		}
	}
	return nil
}

// windowSink appends each window it is given to a file as a line "run
// key start count value", every copy: a window handed on again after a
// crash is written again. With hold > 0 it prints "holding" once it wrote
// its hold-th line of the run, and waits for the run's end (or the kill)
// before it returns: the window is written and its items have not
// settled.
//
// With saves set, each window after the first waits for a checkpoint save
// after the one before it settled: the child then saves the state after
// each window, and a kill right after a save finds windows recorded as
// written whose items are after the saved position.
type windowSink struct {
	f     *os.File
	run   string
	hold  int
	wrote int
	saves <-chan struct{}
}

func (s *windowSink) Write(ctx context.Context, w pipeline.Window[int, int]) error {
	if s.saves != nil && s.wrote > 0 {
		select {
		case <-s.saves:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	line := fmt.Sprintf("%s %d %d %d %d\n", s.run, w.Key, w.Start.UnixNano(), w.Count, w.Value)
	if _, err := s.f.WriteString(line); err != nil {
		return err
	}
	s.wrote++
	if s.saves != nil {
		// Only a save that follows this window counts.
		select {
		case <-s.saves:
		default:
		}
	}
	if s.wrote == s.hold {
		fmt.Println("holding")
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// A windowCopy is one line of the windows file: a copy of a window
// written by run.
type windowCopy struct {
	run int
	id  winKey
	sum winSum
}

// readWindows returns the copies in the windows file, in the order
// written.
func readWindows(path string) ([]windowCopy, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var copies []windowCopy
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l == "" {
			continue
		}
		var c windowCopy
		var start int64
		if _, err := fmt.Sscanf(l, "%d %d %d %d %d", &c.run, &c.id.key, &start, &c.sum.count, &c.sum.value); err != nil {
			return nil, fmt.Errorf("%q: %w", l, err)
		}
		c.id.start = time.Unix(0, start).UTC()
		copies = append(copies, c)
	}
	return copies, nil
}

// savedStore prints "saved N W" once it saved position N with W windows
// recorded as written.
type savedStore struct {
	checkpoint.Store
	mu    sync.Mutex
	saves chan struct{} // a token after each save
}

func (s *savedStore) Save(ctx context.Context, pipe, src string, pos []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Save(ctx, pipe, src, pos); err != nil {
		return err
	}
	p, wins, err := pipeline.DecodeSavedPosition(pos)
	if err != nil {
		return err
	}
	fmt.Printf("saved %s %d\n", p, len(wins))
	select {
	case s.saves <- struct{}{}:
	default:
	}
	return nil
}

// TestEventTimeCrashChild is the child of TestEventTimeWindowsSurviveSIGKILL;
// run alone, it skips.
func TestEventTimeCrashChild(t *testing.T) {
	dir := os.Getenv(etCrashDirEnv)
	if dir == "" {
		t.Skip("the child of TestEventTimeWindowsSurviveSIGKILL")
	}
	src := &crashSource{items: crashItems(), hold: -1, tell: os.Stdout}
	sink := &windowSink{run: os.Getenv(etCrashRunEnv)}
	if stop, n, ok := strings.Cut(os.Getenv(etCrashStopEnv), ":"); ok {
		k, err := strconv.Atoi(n)
		require.NoError(t, err)
		switch stop {
		case "source":
			src.hold = k
		case "sink":
			sink.hold = k
		}
	}
	store := &savedStore{saves: make(chan struct{}, 1)}
	if os.Getenv(etCrashStopEnv) == "saves" {
		sink.saves = store.saves
	}
	var err error
	sink.f, err = os.OpenFile(filepath.Join(dir, "windows"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer sink.f.Close()
	file, err := checkpoint.OpenFile(filepath.Join(dir, "checkpoint"))
	require.NoError(t, err)
	store.Store = file
	b := pipeline.New("crash", pipeline.WithCheckpoint(store, time.Millisecond))
	var late pipeline.Stream[ev]
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", src), evKey, pipeline.TimeWindow(crashWindow), evZero, evSum,
		pipeline.EventTime(evAt, crashBound, 0), pipeline.Late(&late))
	pipeline.Sink(b, "store", wins, sink)
	pipeline.Sink(b, "late", late, node.SinkFunc[ev](func(_ context.Context, e ev) error {
		return fmt.Errorf("item %d came late", e.ID)
	}))
	_, err = build(t, b).Run(t.Context())
	require.NoError(t, err)
	fmt.Println("done")
}

// runCrashChild runs the child until it prints "done" or kill(line)
// says to SIGKILL it; it returns the lines the child printed and whether
// it was killed.
func runCrashChild(t *testing.T, dir string, run int, stop string, kill func(line string) bool) (lines []string, killed bool) {
	t.Helper()
	// A guard against a child that hangs, not a wait.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEventTimeCrashChild$")
	cmd.Env = append(os.Environ(), etCrashDirEnv+"="+dir, etCrashStopEnv+"="+stop, etCrashRunEnv+"="+strconv.Itoa(run))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && kill(sc.Text()) {
			require.NoError(t, cmd.Process.Kill())
			killed = true
		}
	}
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "the child hung:\n%s\n%s", strings.Join(lines, "\n"), stderr.String())
	if !killed {
		require.NoError(t, err, "%s\n%s", strings.Join(lines, "\n"), stderr.String())
	}
	return lines, killed
}

// An event-time Aggregate under a checkpoint file is killed with SIGKILL
// while items wait in open windows, right after saves that recorded
// windows as written, and after a window was written but before its
// items settled, and resumed each time from the checkpoint. Every copy of
// every window holds the window's whole total (a recomputation over all
// the items), and a window the checkpoint recorded as written at a kill
// is never written again: the resumed run reads its items again and
// settles them Filtered. The only windows written twice are those
// written after the last save before a kill (the window the sink held,
// written and not settled, among them), which the design writes again.
func TestEventTimeWindowsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	items := crashItems()
	late, want := reference(items, crashWindow, crashWindow, crashBound, 0)
	require.Len(t, late, 0, "the input's disorder is within the bound")
	from := func(lines []string) int {
		for _, l := range lines {
			if n, ok := strings.CutPrefix(l, "from "); ok {
				v, err := strconv.Atoi(n)
				require.NoError(t, err)
				return v
			}
		}
		t.Fatalf("the child printed no position: %v", lines)
		return 0
	}
	holding := func() func(string) bool { return func(line string) bool { return line == "holding" } }
	// savedPast kills the child right after it saved a position n items
	// past where it resumed, with at least wins windows recorded as
	// written: windows were written and their items settled.
	savedPast := func(n, wins int) func(string) bool {
		start := -1
		return func(line string) bool {
			if v, ok := strings.CutPrefix(line, "from "); ok {
				start, _ = strconv.Atoi(v)
			}
			v, ok := strings.CutPrefix(line, "saved ")
			var p, w int
			if _, err := fmt.Sscanf(v, "%d %d", &p, &w); err != nil {
				return false
			}
			return ok && start >= 0 && p >= start+n && w >= wins
		}
	}
	// saved returns the windows the checkpoint file records as written.
	saved := func() map[winKey]bool {
		f, err := checkpoint.OpenFile(filepath.Join(dir, "checkpoint"))
		require.NoError(t, err)
		defer f.Close()
		data, err := f.Load(t.Context(), "crash", "src")
		require.NoError(t, err)
		_, wins, err := pipeline.DecodeSavedPosition(data)
		require.NoError(t, err)
		got := map[winKey]bool{}
		for _, w := range wins {
			var k int
			var start int64
			_, err := fmt.Sscanf(w, "sum %d %d", &k, &start)
			require.NoError(t, err, w)
			got[winKey{k, time.Unix(0, start).UTC()}] = true
		}
		return got
	}
	prev, limit := 0, len(items)
	steps := []struct {
		name, stop string
		kill       func(line string) bool
	}{
		// 10 items span about 2.5 minutes: no window has fired.
		{"windows open, none fired", "source:10", holding()},
		// The source holds after 80 items; the windows the watermark
		// passed fire and settle, the later ones stay open.
		{"windows open, some written and saved", "source:80", savedPast(20, 0)},
		{"a window written, its items not settled", "sink:2", holding()},
		{"right after a save", "saves", savedPast(20, 1)},
		{"the first window written, not settled", "sink:1", holding()},
		{"right after a save, again", "saves", savedPast(20, 1)},
		{"to the end", "", func(string) bool { return false }},
	}
	savedAt := map[int]map[winKey]bool{} // by run: what the checkpoint held after its kill
	for i, st := range steps {
		lines, killed := runCrashChild(t, dir, i, st.stop, st.kill)
		at := from(lines)
		assert.GreaterOrEqual(t, at, prev, "step %d (%s): a resumed run never goes back past a saved position", i, st.name)
		assert.LessOrEqual(t, at, limit, "step %d (%s): the item the source held at was in an open window, which holds its position", i, st.name)
		prev, limit = at, len(items)
		if k, ok := strings.CutPrefix(st.stop, "source:"); ok && killed {
			n, err := strconv.Atoi(k)
			require.NoError(t, err)
			limit = at + n
		}
		require.Equal(t, i < len(steps)-1, killed, "step %d (%s)", i, st.name)
		if killed {
			savedAt[i] = saved()
		}
		t.Logf("step %d (%s): resumed at item %d; %d windows recorded as written at the kill", i, st.name, at, len(savedAt[i]))
	}
	copies, err := readWindows(filepath.Join(dir, "windows"))
	require.NoError(t, err)
	runs := map[winKey][]int{}
	got := map[winKey]winSum{}
	for _, c := range copies {
		assert.Equal(t, want[c.id], c.sum, "window %d %s, written by run %d: every copy is whole", c.id.key, c.id.start.Format(time.TimeOnly), c.run)
		runs[c.id] = append(runs[c.id], c.run)
		got[c.id] = c.sum
	}
	assert.Equal(t, want, got, "every window written, with its whole total")
	recorded, twice := 0, 0
	for run, wins := range savedAt {
		for id := range wins {
			recorded++
			rs := runs[id]
			require.NotEmpty(t, rs, "window %v recorded as written at the kill of run %d was written", id, run)
			assert.LessOrEqual(t, rs[0], run, "window %v recorded at the kill of run %d was written by then", id, run)
			assert.LessOrEqual(t, rs[len(rs)-1], run, "window %v, recorded as written at the kill of run %d, is not written again after it", id, run)
		}
	}
	for id, rs := range runs {
		for j := 1; j < len(rs); j++ {
			assert.NotEqual(t, rs[j-1], rs[j], "window %v written twice by one run", id)
			assert.False(t, savedAt[rs[j-1]][id], "window %v written again after the checkpoint recorded it", id)
		}
		if len(rs) > 1 {
			twice++
		}
	}
	assert.Greater(t, recorded, 0, "some kill came after windows were recorded as written")
	// The sink's holds leave a window written and not settled: the next
	// run writes it again.
	assert.Greater(t, twice, 0, "a window written and not settled at a kill is written again")
	t.Logf("%d windows; %d recorded as written at kills; %d written twice (after the last save before a kill)", len(got), recorded, twice)
}
