package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The demo drains on SIGINT or SIGTERM (pipeline.RunUntilSignal): sent
// while it runs, the signal stops the reading, every row read reaches
// its outcome, the summary says "drained", and the demo exits 0. The next
// run resumes where the drained one stopped.
//
// The signal goes with the first progress line: "etl: running" comes
// just before RunUntilSignal starts to listen, and a signal sent then
// may overtake it and kill the demo, as it would before the job began.
// Off a terminal (the test reads a pipe) the demo prints a progress line
// every -progress but no more often than every 2 s, so -progress 100ms
// only turns the lines on: the first comes 2 s into the run, which lasts
// several seconds at 20 ms a call (30 000 rows: about 10 s unsignalled,
// waiting on the calls, not working; the run after the drain reads the
// rest at no latency, and the fewer rows the less it works).
func TestDemoDrainsOnASignal(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the demo; skipped with -short")
	}
	bin := buildDemo(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			demoDrains(t, bin, sig)
		})
	}
}

// demoDrains runs the demo, signals it with sig, and runs it again.
func demoDrains(t *testing.T, bin string, sig syscall.Signal) {
	dir := t.TempDir()
	args := []string{"-db", filepath.Join(dir, "orders.db"), "-rows", "30000", "-latency", "20ms", "-outage", "0", "-progress", "100ms"}
	out := signalDemo(t, bin, args, sig)
	m := regexp.MustCompile(`drained: it stopped reading after row (\d+) of 30000`).FindStringSubmatch(out)
	require.NotNil(t, m, "%s: drained\n%s", sig, out)
	assert.NotContains(t, out, "stopped before the end", sig)
	assert.NotEqual(t, "0", m[1], "%s: it read rows before the signal", sig)

	// (The latency is not part of where a run resumes.)
	again := runDemo(t, bin, dir, []string{"-rows", "30000", "-latency", "0", "-outage", "0", "-progress", "0"}, -1)
	assert.Contains(t, again, "etl: resumed after row "+m[1]+" of 30000", "%s: the next run goes on from there", sig)
}

// signalDemo runs bin with args, sends it sig with the first line it
// prints after it says it runs, and returns what it printed; it must exit
// 0.
func signalDemo(t *testing.T, bin string, args []string, sig syscall.Signal) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var out strings.Builder
	running, sent := false, false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		fmt.Fprintln(&out, sc.Text())
		switch {
		case strings.HasPrefix(sc.Text(), "etl: running"):
			running = true
		case running && !sent:
			require.NoError(t, cmd.Process.Signal(sig))
			sent = true
		}
	}
	require.NoError(t, sc.Err())
	require.NoError(t, cmd.Wait(), "%s: exits 0\n%s\n%s", sig, out.String(), stderr.String())
	require.True(t, sent, "a line came while it ran\n%s", out.String())
	return out.String()
}
