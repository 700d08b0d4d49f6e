package main_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// bin is the sluice binary under test, built by TestMain: the tests run
// the real program, flag parsing and exit codes included.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sluice")
	args := append(append([]string{"build"}, buildFlags...), "-o", bin, ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// goleak.VerifyTestMain would exit before the clean-up.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// sluice runs the program with args in dir and returns its exit code,
// stdout and stderr.
func sluice(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stdout.String(), stderr.String()
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture writes the dead-letter files the tests read into a new
// directory: dlq.jsonl, whole, and damaged.jsonl, with a corrupt line in
// the middle and a torn last line.
// item is the item type of the fixture's envelopes.
type item struct {
	ID  int    `json:"id"`
	SKU string `json:"sku"`
}

func fixture(t *testing.T) string {
	t.Helper()
	at := func(min int) time.Time { return epoch.Add(time.Duration(min) * time.Minute) }
	history := func(min int, errText string, calls int) []deadletter.Attempt {
		var h []deadletter.Attempt
		for i := range calls {
			// Delay is the wait chosen after the call; none after the last.
			var delay time.Duration
			if i < calls-1 {
				delay = time.Second
			}
			h = append(h, deadletter.Attempt{Time: at(min).Add(time.Duration(i) * time.Second), Layer: resilience.ItemRetry, Retry: i, Delay: delay, Err: errText})
		}
		return h
	}
	env := func(id int, origin, decision, errText string, calls, min int) deadletter.Envelope {
		return deadletter.Envelope{
			Item: item{ID: id, SKU: "A-" + strconv.Itoa(id)}, ErrText: errText,
			Pipeline: "orders", RunID: "run-7", OriginNode: origin, DecisionNode: decision,
			Attempts: calls, History: history(min, errText, calls),
			FirstFailure: at(min), LastFailure: at(min).Add(time.Duration(calls-1) * time.Second),
		}
	}
	envs := []deadletter.Envelope{
		env(1, "price", "price", "price service: status 503", 4, 0),
		env(2, "price", "price", "price service: status 503", 4, 1),
		env(3, "store", "store", "db: duplicate key \"orders_pkey\"\nDETAIL: Key (id)=(3) already exists.", 1, 2),
		env(4, "reserve", "reserve", "inventory: sku A-4 has no stock in any warehouse near the delivery address", 2, 3),
		env(5, "enrich", "route", "price service: status 503", 1, 4),
		env(6, "price", "price", "price service: status 429", 4, 5),
	}
	envs[3].CorrelationID = "order-4"
	envs[5].Item = map[string]any{"id": 6, "price": math.NaN()} // lands with its encoding error

	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "dlq.jsonl"))
	require.NoError(t, err)
	for _, e := range envs {
		require.NoError(t, f.Write(t.Context(), e))
	}
	require.NoError(t, f.Close())

	data, err := os.ReadFile(filepath.Join(dir, "dlq.jsonl"))
	require.NoError(t, err)
	lines := strings.SplitAfter(string(data), "\n")
	damaged := lines[0] + lines[1] + "{\"item\": oops}\n" + lines[2] + lines[3][:40]
	require.NoError(t, os.WriteFile(filepath.Join(dir, "damaged.jsonl"), []byte(damaged), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "exists.jsonl"), nil, 0o600))
	writeRows(t, dir)
	return dir
}

// writeRows writes rows.jsonl, whose errors carry each row's detail, over
// two runs: run-1's letters rotated to rows.jsonl.000001, run-2's in
// rows.jsonl.
func writeRows(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, "rows.jsonl")
	runs := [][]string{
		{
			"order ord-0000017 breaks rule: amount must be positive",
			`malformed row "2026-13-01,12.00,EUR": date: month out of range`,
			"rates: status 503 after 4 attempts",
		},
		{
			"order ord-0000123 breaks rule: amount must be positive",
			"order ord-0004711 breaks rule: amount must be positive",
			`malformed row "2026-02-30,9.50,EUR": date: day out of range`,
			`rates: unknown currency "XYZ"`,
			`rates: unknown currency "ABC"`,
			"rates: status 429 after 2 attempts",
		},
	}
	for i, errs := range runs {
		f, err := deadletter.OpenFile(path)
		require.NoError(t, err)
		require.NoError(t, f.Rotate())
		for j, e := range errs {
			node := "validate"
			if strings.HasPrefix(e, "rates") {
				node = "enrich"
			}
			require.NoError(t, f.Write(t.Context(), deadletter.Envelope{
				Item: item{ID: 100*i + j}, ErrText: e, Pipeline: "orders", RunID: fmt.Sprintf("run-%d", i+1),
				OriginNode: node, DecisionNode: node, Attempts: 1,
				FirstFailure: epoch.Add(time.Duration(i) * time.Hour), LastFailure: epoch.Add(time.Duration(i) * time.Hour),
			}))
		}
		require.NoError(t, f.Close())
	}
}

// golden compares got with testdata/name.golden, or rewrites the file
// under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), got, "golden file %s; go test -update rewrites it", path)
}
