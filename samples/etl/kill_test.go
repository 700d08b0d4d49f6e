package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
)

// demo is the demo's program, built once for every test that runs it
// (buildDemo) and removed by TestMain. Each of the three tests built its
// own before: in a clean clone each go build compiled the dependencies
// (SQLite among them) without the race detector, beside the race build of
// the tests, three at once (one such build alone: 62 s of CPU, 94 s on
// the project's loaded 2-core machine).
var demo struct {
	once sync.Once
	dir  string // the folder of bin; TestMain removes it
	bin  string
	out  []byte // what go build printed
	err  error
}

// buildDemo builds the demo's program, the first time it is called, and
// returns its path.
func buildDemo(t *testing.T) string {
	t.Helper()
	demo.once.Do(func() {
		demo.dir, demo.err = os.MkdirTemp("", "sluice-etl-demo-")
		if demo.err != nil {
			return
		}
		demo.bin = filepath.Join(demo.dir, "etl")
		demo.out, demo.err = exec.Command("go", "build", "-o", demo.bin, ".").CombinedOutput()
	})
	require.NoError(t, demo.err, string(demo.out))
	return demo.bin
}

// removeDemo removes the program buildDemo built, if it did.
func removeDemo() {
	if demo.dir != "" {
		os.RemoveAll(demo.dir)
	}
}

// TestDemoKilledAndRunAgain kills the demo with SIGKILL mid-run a few
// times, then runs it until it finishes: it ends with the same tables and
// the same dead letters (as a set) as a run that was never interrupted.
func TestDemoKilledAndRunAgain(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the demo; skipped with -short")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("%s=%d", crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	bin := buildDemo(t)
	// Checkpoints every 50 ms, so that a kill after a few hundred
	// milliseconds finds one; the exchange-rate calls take 10 ms, so that
	// a run lasts about a second, waiting on the calls rather than
	// working, and a kill finds it running: with no latency a run ended
	// before its first kill in 3 of 4 tries. The size is not the point:
	// 5000 rows (20 000 before, at 1 ms a call) keep the comparison of the
	// tables below, which SQLite runs under the race detector in this
	// process, at a quarter of its time: with 20 000 it was 8 s of the
	// test's 10 s alone, and the test took 43 s in a run of the whole
	// package.
	args := []string{"-rows", "5000", "-latency", "10ms", "-outage", "0", "-progress", "0", "-checkpoint-every", "50ms"}

	whole := t.TempDir()
	out := runDemo(t, bin, whole, args, -1)
	require.Contains(t, out, "starting at the first row of 5000 (no checkpoint yet)")

	killed := t.TempDir()
	resumedAfter := regexp.MustCompile(`(?m)^etl: resumed after row (\d+) of 5000 `)
	var resumes []int
	for kill := 0; ; kill++ {
		delay := -1 * time.Millisecond // not killed
		// Three kills, and more while no run has resumed yet: on a loaded
		// machine a run may be killed before its first save, and then the
		// next one starts over. The later kills come later, up to ten.
		if kill < 3 || len(resumes) == 0 && kill < 10 {
			delay = time.Duration(100+rng.IntN(400)) * time.Millisecond * time.Duration(1+kill/3)
		}
		out := runDemo(t, bin, killed, args, delay)
		if m := resumedAfter.FindStringSubmatch(out); m != nil {
			n, _ := strconv.Atoi(m[1])
			resumes = append(resumes, n)
		}
		if strings.Contains(out, "Sluice ETL demo:") {
			break // it finished
		}
	}
	t.Logf("the runs after a kill resumed after rows %v", resumes)
	require.NotEmpty(t, resumes, "a run resumed from a checkpoint")

	for _, q := range []string{
		"SELECT id, customer, cents, currency, eur_cents, day FROM orders ORDER BY id",
		"SELECT customer, day, orders, eur_cents FROM customer_day_totals ORDER BY customer, day",
	} {
		assert.Equal(t, dump(t, filepath.Join(whole, "orders.db"), q), dump(t, filepath.Join(killed, "orders.db"), q), q)
	}
	// The day windows' totals, with the late orders, are a GROUP BY over
	// the orders, however the kills cut the days (a row late in a killed
	// run may be in a window after the resume: see days.go).
	assertTotalsMatchOrders(t, filepath.Join(whole, "orders.db"))
	assertTotalsMatchOrders(t, filepath.Join(killed, "orders.db"))
	// The runs after a kill appended to the file of the run they went on
	// from: one file, no rotated one.
	assert.NoFileExists(t, filepath.Join(killed, "dead-letters.jsonl.000001"))
	want, wantN := letterSet(t, filepath.Join(whole, "dead-letters.jsonl"))
	got, gotN := letterSet(t, filepath.Join(killed, "dead-letters.jsonl"))
	assert.Equal(t, want, got, "the same dead letters")
	assert.Equal(t, len(want), wantN)
	assert.Equal(t, len(got), gotN, "each once")
}

// runDemo runs bin with args, its database in dir, and kills it with
// SIGKILL delay after it said where it starts (never when delay is
// negative). It returns what the program printed.
func runDemo(t *testing.T, bin, dir string, args []string, delay time.Duration) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-db", filepath.Join(dir, "orders.db")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var out strings.Builder
	var timer *time.Timer
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		fmt.Fprintln(&out, sc.Text())
		if delay >= 0 && timer == nil && (strings.HasPrefix(sc.Text(), "etl: starting") || strings.HasPrefix(sc.Text(), "etl: resumed")) {
			timer = time.AfterFunc(delay, func() { cmd.Process.Kill() })
		}
	}
	require.NoError(t, sc.Err())
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Error() == "signal: killed" {
		return out.String()
	}
	require.NoError(t, err, "%s\n%s", out.String(), stderr.String())
	return out.String()
}

// dump returns the rows query returns from the database at path, one
// string each.
func dump(t *testing.T, path, query string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), query)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		out = append(out, fmt.Sprint(vals...))
	}
	require.NoError(t, rows.Err())
	return out
}

// letterSet returns the dead letters of the file set at path, as a set of
// what does not change from run to run, and how many envelopes it holds.
func letterSet(t *testing.T, path string) (map[string]bool, int) {
	t.Helper()
	set := map[string]bool{}
	n := 0
	for env, err := range deadletter.ReadAll(path) {
		require.NoError(t, err)
		set[fmt.Sprintf("%s|%s|%x|%s|%s", env.OriginNode, env.Source, env.Position, env.ErrText, env.Item)] = true
		n++
	}
	return set, n
}
