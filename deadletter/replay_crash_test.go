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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// The replay crash test runs this test binary as a child that plays a
// resumed run which replays its input from the start: it dead-letters the
// same envelopes, with their source positions, every time it runs.
const (
	replayChildEnv  = "SLUICE_DLQ_REPLAY_CHILD"  // the file
	replayPolicyEnv = "SLUICE_DLQ_REPLAY_POLICY" // "every" or "group"
	replaySeedEnv   = "SLUICE_DLQ_REPLAY_SEED"   // set to repeat a run's kill moments
	replayMaxBytes  = 8 << 10                    // rotates every dozen envelopes or so
	replayPositions = 120
)

// replayEnvelopes are the envelopes of every run: positions 0 to
// replayPositions-1, each with one to three parts (as a FlatMap's), part
// p of position i being order i*10+p.
func replayEnvelopes() []deadletter.Envelope {
	var envs []deadletter.Envelope
	for i := range replayPositions {
		for p := range 1 + i%3 {
			env := sampleEnvelope(i*10 + p)
			env.Source = "orders-csv"
			env.Position = []byte(strconv.Itoa(i * 64))
			envs = append(envs, env)
		}
	}
	return envs
}

// replayChild writes replayEnvelopes with four concurrent writers and
// prints each envelope's order ID once its Write returned; at the end it
// prints "done", the writes and the duplicates. It returns the exit code.
func replayChild() int {
	opts := []deadletter.FileOption{deadletter.WithMaxBytes(replayMaxBytes)}
	if os.Getenv(replayPolicyEnv) == "group" {
		opts = append(opts, deadletter.WithGroupCommit(time.Millisecond))
	}
	f, err := deadletter.OpenFile(os.Getenv(replayChildEnv), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay child:", err)
		return 1
	}
	envs := replayEnvelopes()
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !failed.Load() {
				n := int(next.Add(1) - 1)
				if n >= len(envs) {
					return
				}
				if err := f.Write(context.Background(), envs[n]); err != nil {
					fmt.Fprintln(os.Stderr, "replay child:", err)
					failed.Store(true)
					return
				}
				fmt.Fprintf(os.Stdout, "%d\n", orderID(envs[n]))
			}
		})
	}
	wg.Wait()
	stats := f.Stats()
	if err := f.Close(); err != nil || failed.Load() {
		fmt.Fprintln(os.Stderr, "replay child:", err)
		return 1
	}
	fmt.Fprintf(os.Stdout, "done %d %d\n", stats.Writes, stats.Duplicates)
	return 0
}

func orderID(env deadletter.Envelope) int { return env.Item.(order).ID }

func TestReplayAfterKillsDeadLettersEachItemOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts child processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(replaySeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("%s=%d", replaySeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	want := map[int]bool{}
	for _, env := range replayEnvelopes() {
		want[orderID(env)] = true
	}

	// Twenty runs killed at random moments, each replaying everything
	// from the start, then one that runs to its end.
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	reported := map[int]bool{}
	const kills = 20
	for round := range kills {
		policy := []string{"every", "group"}[round%2]
		killAfter := 1 + rng.IntN(len(want))
		n, done := runReplayChild(t, path, policy, killAfter, reported)
		t.Logf("round %d (%s): kill after %d reports, %d reported, finished: %t", round, policy, killAfter, n, done)
	}
	n, done := runReplayChild(t, path, "group", 0, reported)
	require.True(t, done, "the last run ends by itself")
	assert.Equal(t, len(want), n, "every Write of the last run returned nil")
	assert.Equal(t, len(want), len(reported))

	// Every envelope is in the files exactly once.
	count := map[int]int{}
	corrupt := 0
	for env, err := range deadletter.ReadAll(path) {
		if err != nil {
			require.ErrorIs(t, err, deadletter.ErrCorruptLine, "only torn lines that a later run ended")
			corrupt++
			continue
		}
		id := orderID0(t, env)
		count[id]++
		assert.True(t, want[id], "order %d was never dead-lettered", id)
	}
	for id := range want {
		assert.Equal(t, 1, count[id], "order %d is in the files %d times", id, count[id])
	}
	assert.LessOrEqual(t, corrupt, kills, "at most one torn line per kill")
	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	assert.Greater(t, len(rotated), 3, "the envelopes span rotated files")
}

func orderID0(t *testing.T, env deadletter.Envelope) int {
	t.Helper()
	var o order
	require.NoError(t, jsonUnmarshal(env.Item, &o))
	return o.ID
}

// runReplayChild starts a replay child on path and kills it with SIGKILL
// once it reported killAfter envelopes (never when killAfter is 0). It
// adds the reported IDs to reported, and returns how many the child
// reported and whether it ended by itself. A child that ends by itself
// must have written, or found, every envelope.
func runReplayChild(t *testing.T, path, policy string, killAfter int, reported map[int]bool) (int, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), replayChildEnv+"="+path, replayPolicyEnv+"="+policy)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	n := 0
	var summary string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "done "); ok {
			summary = rest
			continue
		}
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
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Error() == "signal: killed" {
		require.GreaterOrEqual(t, n, killAfter, "killed before it was told to be:\n%s", stderr.String())
		return n, false
	}
	require.NoError(t, err, "the child failed:\n%s", stderr.String())
	var writes, dups int
	_, err = fmt.Sscanf(summary, "%d %d", &writes, &dups)
	require.NoError(t, err, "child's summary %q", summary)
	assert.Equal(t, n, writes+dups, "every Write returned nil, having written or found its envelope")
	return n, true
}
