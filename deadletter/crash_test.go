package deadletter_test

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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// The crash test runs its own test binary as a child process that writes
// envelopes until it is killed. The child is told what to do through these
// variables: the file, the sync policy and the first envelope number.
const (
	crashChildEnv  = "SLUICE_DLQ_CRASH_CHILD"
	crashPolicyEnv = "SLUICE_DLQ_CRASH_POLICY"
	crashFromEnv   = "SLUICE_DLQ_CRASH_FROM"
	crashSeedEnv   = "SLUICE_DLQ_CRASH_SEED" // set to repeat a run's kill moments
)

// crashChild writes envelopes numbered from $SLUICE_DLQ_CRASH_FROM with
// four concurrent writers, and prints each number once its Write returned.
// It returns the exit code; normally it is killed long before it returns.
func crashChild() int {
	from, err := strconv.Atoi(os.Getenv(crashFromEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	var opts []deadletter.FileOption
	if os.Getenv(crashPolicyEnv) == "group" {
		opts = append(opts, deadletter.WithGroupCommit(time.Millisecond))
	}
	f, err := deadletter.OpenFile(os.Getenv(crashChildEnv), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 1
	}
	const writers, limit = 4, 100_000
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for !failed.Load() {
				n := int(next.Add(1) - 1)
				if n >= limit {
					return
				}
				if err := f.Write(context.Background(), sampleEnvelope(from+n)); err != nil {
					fmt.Fprintln(os.Stderr, "crash child:", err)
					failed.Store(true)
					return
				}
				// One write of a short line to a pipe: lines of concurrent
				// writers do not interleave.
				fmt.Fprintf(os.Stdout, "%d\n", from+n)
			}
		})
	}
	wg.Wait()
	if err := f.Close(); err != nil || failed.Load() {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 1
	}
	return 0
}

func TestCrashLosesNothingReportedAsWritten(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts child processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("%s=%d", crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	// Three children write to the same file in turn, each killed at a
	// random moment; every one after the first opens a file that a kill
	// may have left torn.
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	reported := map[int]bool{}
	policies := []string{"every", "group", "every", "group"}
	for round, policy := range policies {
		killAfter := 1 + rng.IntN(200)
		from := round * 1_000_000
		n := runCrashChild(t, path, policy, from, killAfter, reported)
		t.Logf("round %d (%s): killed after %d lines, %d reported", round, policy, killAfter, n)
	}

	read := map[int]bool{}
	torn, corrupt := 0, 0
	var lastLine int
	for r, err := range deadletter.ReadRecords(path) {
		var le *deadletter.LineError
		switch {
		case err == nil:
			var o order
			require.NoError(t, jsonUnmarshal(r.Item, &o))
			assert.False(t, read[o.ID], "envelope %d twice", o.ID)
			read[o.ID] = true
			lastLine = r.Line
		case errors.Is(err, deadletter.ErrTornLine):
			torn++
			require.ErrorAs(t, err, &le)
			lastLine = le.Line
		case errors.Is(err, deadletter.ErrCorruptLine):
			// A torn line that the next child's OpenFile ended.
			corrupt++
		default:
			require.NoError(t, err)
		}
	}
	for id := range reported {
		assert.True(t, read[id], "envelope %d was reported as written but is not in the file", id)
	}
	assert.LessOrEqual(t, torn, 1, "at most the last line is torn")
	assert.LessOrEqual(t, corrupt, len(policies)-1, "at most one ended torn line per restart")
	if torn == 1 {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, bytes.Count(data, []byte{'\n'})+1, lastLine, "the torn line is the last")
	}
	assert.GreaterOrEqual(t, len(read), len(reported))
}

// runCrashChild starts a child writing to path, kills it with SIGKILL once
// it reported killAfter envelopes, adds every number it reported to
// reported and returns how many it reported.
func runCrashChild(t *testing.T, path, policy string, from, killAfter int, reported map[int]bool) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		crashChildEnv+"="+path, crashPolicyEnv+"="+policy, crashFromEnv+"="+strconv.Itoa(from))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	n := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		id, err := strconv.Atoi(sc.Text())
		require.NoError(t, err, "child printed %q", sc.Text())
		reported[id] = true
		n++
		if n == killAfter {
			require.NoError(t, cmd.Process.Kill()) // SIGKILL: no deferred code runs
		}
	}
	require.NoError(t, sc.Err())
	err = cmd.Wait()
	require.GreaterOrEqual(t, n, killAfter, "the child ended before it was killed: %v\n%s", err, stderr.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, "signal: killed", exit.Error())
	return n
}
