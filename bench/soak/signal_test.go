package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// make soak interrupted (Ctrl-C, or SIGTERM from a CI job's timeout)
// ends its pipelines, removes its temp dir, writes a report of what it
// sampled marked interrupted, and exits 1 (not killed by the signal).
func TestSIGTERMCleansUpAndReports(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the soak binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "soak")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	tmp := filepath.Join(dir, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))
	out := filepath.Join(dir, "report")
	cmd := exec.Command(bin, "-duration", "1m", "-sample", "1s", "-out", out)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stderr)
	etlStarted := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "proxy ") {
			break
		}
	}
	// Wait until the ETL loop made its dir (a busy read of the temp dir,
	// not a sleep): it appears within the first cycle.
	for !etlStarted {
		ents, _ := os.ReadDir(tmp)
		etlStarted = len(ents) > 0
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	go func() {
		for sc.Scan() {
		}
	}()
	_ = cmd.Wait()
	ents, _ := os.ReadDir(tmp)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	assert.Empty(t, left, "temp dirs left after SIGTERM")
	_, err = os.Stat(filepath.Join(out, "report.md"))
	assert.NoError(t, err, "no report after SIGTERM")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.False(t, ws.Signaled(), "the soak died of %v instead of ending its run", ws.Signal())
	assert.Equal(t, 1, ws.ExitStatus(), "an interrupted run is not a PASS")
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "# Soak report: INTERRUPTED (not a PASS)")
}
