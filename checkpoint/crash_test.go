package checkpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// The crash test runs its own test binary as a child process that saves
// positions until it is killed. The child is told the file and the number
// of its first position through these variables.
const (
	crashChildEnv = "SLUICE_CHECKPOINT_CRASH_CHILD"
	crashFromEnv  = "SLUICE_CHECKPOINT_CRASH_FROM"
	crashSeedEnv  = "SLUICE_CHECKPOINT_CRASH_SEED" // set to repeat a run's kill moments
)

// crashPos returns position n: its number, then up to 64 KiB of bytes
// made from n, so that a save takes a while and a torn or mixed file shows.
func crashPos(n int) []byte {
	size := (n * 7919) % (64 << 10)
	return append(fmt.Appendf(nil, "%d;", n), bytes.Repeat([]byte{byte(n), byte(n >> 8), 0x5a, byte(n * 31)}, size/4)...)
}

// crashNumber returns the number a crashPos starts with.
func crashNumber(p []byte) (int, error) {
	i := bytes.IndexByte(p, ';')
	if i < 0 {
		return 0, fmt.Errorf("no number in %d bytes", len(p))
	}
	return strconv.Atoi(string(p[:i]))
}

// crashChild saves positions numbered from $SLUICE_CHECKPOINT_CRASH_FROM,
// one after the other, and prints each number once its Save returned. It
// returns the exit code; normally it is killed long before it returns.
func crashChild() int {
	from, err := strconv.Atoi(os.Getenv(crashFromEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	f, err := checkpoint.OpenFile(os.Getenv(crashChildEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 1
	}
	for n := from; n < from+1_000_000; n++ {
		if err := f.Save(context.Background(), "orders", "read", crashPos(n)); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			return 1
		}
		fmt.Fprintf(os.Stdout, "%d\n", n)
	}
	return 0
}

// A child saving positions in a loop is killed with SIGKILL at random
// moments, 20 times; after each kill the file opens and holds the last
// position the child reported as saved, or the one it was saving.
func TestCrashLeavesTheOldOrTheNewPosition(t *testing.T) {
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

	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	other := crashPos(99_999)
	require.NoError(t, f.Save(context.Background(), "invoices", "read", other))
	require.NoError(t, f.Close())

	next, newer, midSave := 0, 0, 0
	const kills = 20
	for round := range kills {
		killAfter := 1 + rng.IntN(20)
		delay := time.Duration(rng.IntN(3000)) * time.Microsecond
		last := runCrashChild(t, path, next, killAfter, delay)
		if _, err := os.Stat(path + ".tmp"); err == nil {
			midSave++ // killed between the temporary file's creation and its rename
		}

		f, err := checkpoint.OpenFile(path)
		require.NoError(t, err, "round %d: the file opens after the kill", round)
		pos, err := f.Load(context.Background(), "orders", "read")
		require.NoError(t, err)
		n, err := crashNumber(pos)
		require.NoError(t, err, "round %d", round)
		require.True(t, n == last || n == last+1,
			"round %d: the file holds position %d; the child last reported %d", round, n, last)
		assert.True(t, bytes.Equal(crashPos(n), pos), "round %d: position %d is whole", round, n)
		if n == last+1 {
			newer++
		}
		got, err := f.Load(context.Background(), "invoices", "read")
		require.NoError(t, err)
		assert.True(t, bytes.Equal(other, got), "round %d: the other pair is kept", round)
		require.NoError(t, f.Close())
		_, err = os.Stat(path + ".tmp")
		assert.ErrorIs(t, err, os.ErrNotExist, "round %d: OpenFile removed what the kill left", round)
		next = n + 1
	}
	t.Logf("%d kills: %d left a temporary file; the file held the position being saved %d times, the last reported %d times",
		kills, midSave, newer, kills-newer)
}

// runCrashChild starts a child saving positions from from to path, kills
// it with SIGKILL delay after it reported killAfter saves, and returns the
// last number it reported. The delay, on the real clock, only moves the
// kill to a random moment of the child's next save: the test's verdict
// does not depend on it.
func runCrashChild(t *testing.T, path string, from, killAfter int, delay time.Duration) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashFromEnv+"="+strconv.Itoa(from))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	n, last := 0, -1
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		id, err := strconv.Atoi(sc.Text())
		require.NoError(t, err, "child printed %q", sc.Text())
		require.Equal(t, from+n, id, "the child saves in order")
		last = id
		n++
		if n == killAfter {
			kill := time.AfterFunc(delay, func() { _ = cmd.Process.Kill() }) // SIGKILL: no deferred code runs
			defer kill.Stop()
		}
	}
	require.NoError(t, sc.Err())
	err = cmd.Wait()
	require.GreaterOrEqual(t, n, killAfter, "the child ended before it was killed: %v\n%s", err, stderr.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, "signal: killed", exit.Error())
	return last
}
