//go:build unix

package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// The signal tests run their own test binary as a child that runs a
// pipeline with RunUntilSignal, and send it real signals. The child is
// told what to do through this variable; it prints "ready" when it is
// ready for the first signal, and a "result: ..." line at the end.
const signalChildEnv = "SLUICE_SIGNAL_CHILD"

// The child's exit codes.
const (
	childDone      = 0
	childFailed    = 1
	childDrained   = 3
	childCancelled = 4
	childTimedOut  = 5
)

// childSource emits 0, 1, 2, ... until its context ends, or only 0..99
// when finite, or when one only 0, and then waits for its context to
// end. It is resumable only so that a checkpoint store's Load runs before
// the run starts.
type childSource struct {
	finite, one bool
	emitted     atomic.Int64
	stopped     func() // called when a source that emits one stops
}

func (s *childSource) Resume([]byte) error { return nil }

func (s *childSource) Run(ctx context.Context, out node.Emitter[int]) error {
	if ctx.Err() != nil {
		fmt.Println("source: drained before its first item")
		return context.Cause(ctx)
	}
	if s.one {
		if err := out.Emit(ctx, 0); err != nil {
			return err
		}
		s.emitted.Add(1)
		<-ctx.Done()
		// The drain's mark is on the context; Emit may not have seen it
		// yet when the source blocks in a send to a full edge.
		fmt.Println("source: stopped:", context.Cause(ctx))
		if s.stopped != nil {
			s.stopped()
		}
		return context.Cause(ctx)
	}
	for i := 0; !s.finite || i < 100; i++ {
		if err := out.Emit(ctx, i); err != nil {
			return err
		}
		s.emitted.Add(1)
	}
	return nil
}

// waitingStore is a checkpoint store whose Load says "ready" and waits
// until RunUntilSignal received its first signal: the signal comes before
// the run started.
type waitingStore struct{}

func (waitingStore) Load(ctx context.Context, _, _ string) ([]byte, error) {
	fmt.Println("ready")
	select {
	case <-pipeline.DrainAsked(ctx):
		fmt.Println("load: the signal came before the run started")
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (waitingStore) Save(context.Context, string, string, []byte) error { return nil }

// signalChildIfAsked runs the child that the signal tests asked for, if
// any, and returns its exit code.
func signalChildIfAsked() (code int, ok bool) {
	mode := os.Getenv(signalChildEnv)
	if mode == "" {
		return 0, false
	}
	return signalChild(mode), true
}

// signalChild runs the child of mode and returns its exit code:
//
//   - none: 100 items, no signal; then, once it printed "returned", it
//     waits for its standard input to end.
//   - one, usr1: endless items; the first is written as "ready" is
//     printed. usr1 listens for SIGUSR1 only.
//   - two: one item, which the sink holds until the run is cancelled, so
//     only a second signal ends the run; the source says when the drain
//     stopped it.
//   - timeout: as two, under WithDrainTimeout on a fake clock that the
//     child advances once the source stopped.
//   - early: the run's checkpoint Load waits for the first signal.
//   - three: as two, but the sink, once cancelled, says so and never
//     returns: only a third signal ends the child.
func signalChild(mode string) int {
	holds := mode == "two" || mode == "timeout" || mode == "three"
	src := &childSource{finite: mode == "none", one: holds}
	var opts []pipeline.Option
	var signals []os.Signal
	switch mode {
	case "usr1":
		signals = []os.Signal{syscall.SIGUSR1}
	case "early":
		opts = append(opts, pipeline.WithCheckpoint(waitingStore{}, time.Hour))
	case "timeout":
		clock := clockwork.NewFakeClock()
		opts = append(opts, pipeline.WithClock(clock), pipeline.WithDrainTimeout(time.Minute))
		src.stopped = func() {
			// The drain's timer is the only one on the clock.
			go func() {
				_ = clock.BlockUntilContext(context.Background(), 1)
				clock.Advance(time.Minute)
			}()
		}
	}
	b := pipeline.New("signals", opts...)
	var written, delivered atomic.Int64
	pipeline.ForEach(b, "sink", pipeline.Source[int](b, "source", src), func(ctx context.Context, _ int) error {
		if written.Add(1) == 1 && mode != "early" && mode != "none" {
			fmt.Println("ready")
		}
		if holds {
			<-ctx.Done()
			if mode == "three" {
				fmt.Println("sink: cancelled")
				select {} // a call that does not stop when it is told
			}
			return ctx.Err()
		}
		delivered.Add(1)
		return nil
	})
	p, err := b.Build()
	if err != nil {
		fmt.Println("result: build:", err)
		return childFailed
	}
	_, err = pipeline.RunUntilSignal(context.Background(), p, signals...)
	// RunUntilSignal leaves no goroutine behind, whatever stopped it.
	if leak := goleak.Find(); leak != nil {
		fmt.Println("result: leaked:", leak)
		return childFailed
	}
	var se *pipeline.SignalError
	errors.As(err, &se)
	switch {
	case err == nil:
		fmt.Printf("result: done emitted=%d delivered=%d\n", src.emitted.Load(), delivered.Load())
		if mode == "none" {
			fmt.Println("returned")
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
		return childDone
	case errors.Is(err, pipeline.ErrDrained) && se != nil && !se.Cancelled:
		fmt.Printf("result: drained on %v emitted=%d delivered=%d\n", se.Signal, src.emitted.Load(), delivered.Load())
		return childDrained
	case errors.Is(err, context.Canceled) && se != nil && se.Cancelled && errors.Is(err, pipeline.ErrInterrupted):
		fmt.Printf("result: cancelled after %v: %v\n", se.Signal, err)
		return childCancelled
	case errors.Is(err, pipeline.ErrDrainTimeout) && se != nil && !se.Cancelled && !errors.Is(err, pipeline.ErrDrained):
		fmt.Printf("result: drain timed out after %v: %v\n", se.Signal, err)
		return childTimedOut
	}
	fmt.Printf("result: failed: %v\n", err)
	return childFailed
}

// runSignalChild runs the child of mode and calls react with each line it
// prints; react returns the signal to send the child then, or nil. It
// returns the lines and the child's end: its exit code, or -1 when a
// signal killed it, with the signal's name.
func runSignalChild(t *testing.T, mode string, react func(line string) os.Signal) (lines []string, code int, killedBy string) {
	t.Helper()
	// A guard against a child that hangs, not a wait: the test never
	// sleeps for it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), signalChildEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sig := react(sc.Text()); sig != nil {
			require.NoError(t, cmd.Process.Signal(sig))
		}
	}
	require.NoError(t, sc.Err())
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "the child hung:\n%s\n%s", strings.Join(lines, "\n"), stderr.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return lines, -1, ws.Signal().String()
		}
		return lines, exit.ExitCode(), ""
	}
	require.NoError(t, err, stderr.String())
	return lines, 0, ""
}

// on returns a react function that sends sig when the child prints a line
// starting with prefix.
func on(prefix string, sig os.Signal) func(string) os.Signal {
	return func(line string) os.Signal {
		if strings.HasPrefix(line, prefix) {
			return sig
		}
		return nil
	}
}

// result returns the child's "result: " line without its prefix.
func result(t *testing.T, lines []string) string {
	t.Helper()
	for _, l := range lines {
		if r, ok := strings.CutPrefix(l, "result: "); ok {
			return r
		}
	}
	require.Fail(t, "the child printed no result", strings.Join(lines, "\n"))
	return ""
}

// emittedDelivered parses "emitted=N delivered=M" from a result.
func emittedDelivered(t *testing.T, res string) (emitted, delivered int) {
	t.Helper()
	i := strings.Index(res, "emitted=")
	require.True(t, i >= 0, res)
	_, err := fmt.Sscanf(res[i:], "emitted=%d delivered=%d", &emitted, &delivered)
	require.NoError(t, err, res)
	return emitted, delivered
}

// No signal: the run ends as Run would, and once RunUntilSignal returned
// the signals are the program's again: SIGINT kills the child, as it
// kills a Go program that does not listen for it.
func TestRunUntilSignalWithoutSignal(t *testing.T) {
	t.Parallel()
	lines, code, killed := runSignalChild(t, "none", on("returned", os.Interrupt))
	assert.Equal(t, "done emitted=100 delivered=100", result(t, lines))
	assert.Equal(t, -1, code)
	assert.Equal(t, "interrupt", killed, "signal.Stop gave SIGINT back")
}

// One signal drains the run: the source stops, and every item it emitted
// is delivered; the error matches ErrDrained. SIGTERM does the same as
// SIGINT, and a signal given to RunUntilSignal replaces both.
func TestRunUntilSignalFirstSignalDrains(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode string
		sig  syscall.Signal
	}{{"one", syscall.SIGINT}, {"one", syscall.SIGTERM}, {"usr1", syscall.SIGUSR1}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			t.Parallel()
			lines, code, _ := runSignalChild(t, c.mode, on("ready", c.sig))
			res := result(t, lines)
			require.Equal(t, childDrained, code, res)
			assert.True(t, strings.HasPrefix(res, "drained on "+c.sig.String()+" "), res)
			emitted, delivered := emittedDelivered(t, res)
			assert.Positive(t, emitted)
			assert.Equal(t, emitted, delivered, "every item emitted is delivered")
		})
	}
}

// A second signal cancels a run whose drain cannot end (its sink holds an
// item until it is cancelled): the error is a SignalError that says so
// and matches context.Canceled, not ErrDrained.
func TestRunUntilSignalSecondSignalCancels(t *testing.T) {
	t.Parallel()
	sent := 0
	lines, code, _ := runSignalChild(t, "two", func(line string) os.Signal {
		// The first on "ready"; the second once the drain stopped the
		// source, so that the two are not one to the child.
		if line == "ready" || strings.HasPrefix(line, "source: stopped") {
			sent++
			return os.Interrupt
		}
		return nil
	})
	res := result(t, lines)
	require.Equal(t, childCancelled, code, res)
	assert.Equal(t, 2, sent)
	assert.Contains(t, res, "cancelled after interrupt: pipeline: drained on interrupt, cancelled on a second signal: context canceled")
	assert.Contains(t, strings.Join(lines, "\n"), "source: stopped: "+pipeline.ErrDrained.Error())
}

// After the second signal the signals are the program's again: a third
// Ctrl-C kills a program whose cancelled run does not return (its sink
// ignores the cancellation).
func TestRunUntilSignalThirdSignalKills(t *testing.T) {
	t.Parallel()
	sent := 0
	lines, code, killed := runSignalChild(t, "three", func(line string) os.Signal {
		// The first on "ready", the second once the drain stopped the
		// source, the third once the second cancelled the run.
		if line == "ready" || strings.HasPrefix(line, "source: stopped") || line == "sink: cancelled" {
			sent++
			return os.Interrupt
		}
		return nil
	})
	assert.Equal(t, 3, sent, strings.Join(lines, "\n"))
	assert.Equal(t, -1, code, strings.Join(lines, "\n"))
	assert.Equal(t, "interrupt", killed, "the third signal killed the child")
}

// A drain that runs past WithDrainTimeout ends the run with
// ErrDrainTimeout, inside a SignalError that is not a clean drain.
func TestRunUntilSignalDrainTimeout(t *testing.T) {
	t.Parallel()
	lines, code, _ := runSignalChild(t, "timeout", on("ready", os.Interrupt))
	res := result(t, lines)
	require.Equal(t, childTimedOut, code, res)
	assert.Contains(t, res, pipeline.ErrDrainTimeout.Error())
}

// A signal that comes before the run started (while it loads its
// checkpoint) drains the run as it starts: no item is emitted, and the
// run ends drained.
func TestRunUntilSignalBeforeRunStarted(t *testing.T) {
	t.Parallel()
	lines, code, _ := runSignalChild(t, "early", on("ready", os.Interrupt))
	res := result(t, lines)
	require.Equal(t, childDrained, code, strings.Join(lines, "\n"))
	assert.Equal(t, "drained on interrupt emitted=0 delivered=0", res)
	assert.Contains(t, lines, "load: the signal came before the run started")
}

// Without a signal, RunUntilSignal returns what Run returns: a failure,
// the caller's cancellation, or ErrRunning; it leaves no goroutine behind
// (TestMain checks).
func TestRunUntilSignalReturnsRunsOwnEnd(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	b := pipeline.New("signals")
	pipeline.ForEach(b, "sink", pipeline.Source(b, "source", pipelinetest.NewSliceSource(ints(100)...)), func(_ context.Context, v int) error {
		if v == 7 {
			return errBoom
		}
		return nil
	})
	p := build(t, b)
	_, err := pipeline.RunUntilSignal(t.Context(), p, syscall.SIGUSR2)
	require.ErrorIs(t, err, errBoom)
	assert.NotErrorIs(t, err, pipeline.ErrInterrupted)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = pipeline.RunUntilSignal(ctx, p, syscall.SIGUSR2)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, pipeline.ErrInterrupted)

	// A pipeline already running is not run again.
	b = pipeline.New("busy")
	started, release := make(chan struct{}), make(chan struct{})
	pipeline.ForEach(b, "sink", pipeline.Source(b, "source", pipelinetest.NewSliceSource(1)), func(context.Context, int) error {
		close(started)
		<-release
		return nil
	})
	busy := build(t, b)
	run := pipelinetest.Start(t.Context(), busy)
	<-started
	_, err = pipeline.RunUntilSignal(t.Context(), busy, syscall.SIGUSR2)
	require.ErrorIs(t, err, pipeline.ErrRunning)
	close(release)
	_, err = run.Wait()
	require.NoError(t, err)
}

// The errors say what happened, and match what the doc says.
func TestSignalErrorText(t *testing.T) {
	t.Parallel()
	clean := &pipeline.SignalError{Signal: os.Interrupt}
	assert.Equal(t, "pipeline: drained on interrupt: every item taken in reached its outcome", clean.Error())
	assert.ErrorIs(t, clean, pipeline.ErrDrained)
	assert.ErrorIs(t, clean, pipeline.ErrInterrupted)

	late := &pipeline.SignalError{Signal: syscall.SIGTERM, Err: pipeline.ErrDrainTimeout}
	assert.Equal(t, "pipeline: drained on terminated: pipeline: drain timed out", late.Error())
	assert.NotErrorIs(t, late, pipeline.ErrDrained)
	assert.ErrorIs(t, late, pipeline.ErrDrainTimeout)

	cut := &pipeline.SignalError{Signal: os.Interrupt, Cancelled: true, Err: context.Canceled}
	assert.NotErrorIs(t, cut, pipeline.ErrDrained)
	assert.ErrorIs(t, cut, context.Canceled)
	assert.ErrorIs(t, fmt.Errorf("job: %w", cut), pipeline.ErrInterrupted)
}
