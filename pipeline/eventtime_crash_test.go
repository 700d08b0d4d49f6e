package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
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
// writing each window once to a file there, and holds where
// $SLUICE_EVENTTIME_CRASH_STOP says, to be killed.
const (
	etCrashDirEnv  = "SLUICE_EVENTTIME_CRASH_DIR"
	etCrashStopEnv = "SLUICE_EVENTTIME_CRASH_STOP"
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
	fmt.Printf("from %d\n", s.from)
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

// windowSink writes each window to a file as a line "key start count
// value", once: a window the file holds already (a replay after a crash
// handed it on again) is taken and not written again. With hold > 0 it
// prints "holding" once it wrote its hold-th line of the run, and waits
// for the run's end (or the kill) before it returns: the window is
// written and its items have not settled.
type windowSink struct {
	f     *os.File
	have  map[string]bool
	hold  int
	wrote int
}

func windowLine(w pipeline.Window[int, int]) (id, line string) {
	id = fmt.Sprintf("%d %d", w.Key, w.Start.UnixNano())
	return id, fmt.Sprintf("%s %d %d\n", id, w.Count, w.Value)
}

func (s *windowSink) Write(ctx context.Context, w pipeline.Window[int, int]) error {
	id, line := windowLine(w)
	if s.have[id] {
		fmt.Printf("again %s\n", id)
		return nil
	}
	if _, err := s.f.WriteString(line); err != nil {
		return err
	}
	s.have[id] = true
	s.wrote++
	if s.wrote == s.hold {
		fmt.Println("holding")
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// readWindows returns the lines of the windows file, each "key start count value".
func readWindows(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Fields(strings.ReplaceAll(string(data), " ", "_")), nil
}

// savedStore prints "saved N" once it saved position N.
type savedStore struct {
	checkpoint.Store
	mu sync.Mutex
}

func (s *savedStore) Save(ctx context.Context, pipe, src string, pos []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Save(ctx, pipe, src, pos); err != nil {
		return err
	}
	fmt.Printf("saved %s\n", pos)
	return nil
}

// TestEventTimeCrashChild is the child of TestEventTimeWindowsSurviveSIGKILL;
// run alone, it skips.
func TestEventTimeCrashChild(t *testing.T) {
	dir := os.Getenv(etCrashDirEnv)
	if dir == "" {
		t.Skip("the child of TestEventTimeWindowsSurviveSIGKILL")
	}
	src := &crashSource{items: crashItems(), hold: -1}
	sink := &windowSink{have: map[string]bool{}}
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
	lines, err := readWindows(filepath.Join(dir, "windows"))
	require.NoError(t, err)
	for _, l := range lines {
		f := strings.Split(l, "_")
		sink.have[f[0]+" "+f[1]] = true
	}
	sink.f, err = os.OpenFile(filepath.Join(dir, "windows"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer sink.f.Close()
	file, err := checkpoint.OpenFile(filepath.Join(dir, "checkpoint"))
	require.NoError(t, err)
	b := pipeline.New("crash", pipeline.WithCheckpoint(&savedStore{Store: file}, time.Millisecond))
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
func runCrashChild(t *testing.T, dir, stop string, kill func(line string) bool) (lines []string, killed bool) {
	t.Helper()
	// A guard against a child that hangs, not a wait.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEventTimeCrashChild$")
	cmd.Env = append(os.Environ(), etCrashDirEnv+"="+dir, etCrashStopEnv+"="+stop)
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
// while items wait in open windows, after a window was written but before
// its items settled, and after windows settled and their position was
// saved, and resumed each time from the checkpoint: in the end each window
// was written exactly once, with the totals of a recomputation over all
// the items. Open windows hold the position back, so a resumed run reads
// every item of each window not written yet again; the windows it hands
// on again that were written already are taken by the sink's check.
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
	// savedPast kills the child once it saved a position n items past
	// where it resumed: windows were written and their items settled.
	savedPast := func(n int) func(string) bool {
		start := -1
		return func(line string) bool {
			if v, ok := strings.CutPrefix(line, "from "); ok {
				start, _ = strconv.Atoi(v)
			}
			v, ok := strings.CutPrefix(line, "saved ")
			p, _ := strconv.Atoi(v)
			return ok && start >= 0 && p >= start+n
		}
	}
	prev, again, limit := 0, 0, len(items)
	steps := []struct {
		name, stop string
		kill       func(line string) bool
	}{
		// 10 items span about 2.5 minutes: no window has fired.
		{"windows open, none fired", "source:10", holding()},
		// The source holds after 80 items; the windows the watermark
		// passed fire and settle, the later ones stay open.
		{"windows open, some fired and saved", "source:80", savedPast(20)},
		{"a window written, its items not settled", "sink:2", holding()},
		{"windows settled and saved", "source:80", savedPast(20)},
		{"the first window written, not settled", "sink:1", holding()},
		{"to the end", "", func(string) bool { return false }},
	}
	for i, st := range steps {
		kill := st.kill
		lines, killed := runCrashChild(t, dir, st.stop, kill)
		at := from(lines)
		assert.GreaterOrEqual(t, at, prev, "step %d (%s): a resumed run never goes back past a saved position", i, st.name)
		assert.LessOrEqual(t, at, limit, "step %d (%s): the item the source held at was in an open window, which holds its position", i, st.name)
		prev, limit = at, len(items)
		if k, ok := strings.CutPrefix(st.stop, "source:"); ok && killed {
			n, err := strconv.Atoi(k)
			require.NoError(t, err)
			limit = at + n
		}
		t.Logf("step %d (%s): resumed at item %d", i, st.name, at)
		for _, l := range lines {
			if strings.HasPrefix(l, "again ") {
				again++
			}
		}
		assert.Equal(t, i < len(steps)-1, killed, "step %d (%s)", i, st.name)
	}
	lines, err := readWindows(filepath.Join(dir, "windows"))
	require.NoError(t, err)
	got := map[winKey]winSum{}
	for _, l := range lines {
		var k, c, v int
		var start int64
		_, err := fmt.Sscanf(strings.ReplaceAll(l, "_", " "), "%d %d %d %d", &k, &start, &c, &v)
		require.NoError(t, err, l)
		id := winKey{k, time.Unix(0, start).UTC()}
		_, dup := got[id]
		assert.False(t, dup, "window %v written twice", id)
		got[id] = winSum{c, v}
	}
	assert.Equal(t, want, got, "each window once, with its whole total")
	// The kill after a written, unsettled window makes the next run hand
	// it on again.
	assert.Greater(t, again, 0, "a resumed run handed on windows written before the kill")
	t.Logf("%d windows; %d handed on again after a kill and taken by the sink's check", len(got), again)
}
