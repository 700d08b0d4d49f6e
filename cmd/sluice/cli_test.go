package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

func TestCLIGolden(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	tests := []struct {
		name string
		args string
		exit int
	}{
		{"help", "help", 0},
		{"help-flag", "-h", 0},
		{"no-command", "", 2},
		{"unknown-command", "frobnicate", 2},
		{"dlq-no-subcommand", "dlq", 2},
		{"dlq-unknown-subcommand", "dlq rm dlq.jsonl", 2},
		{"ls", "dlq ls dlq.jsonl", 0},
		{"ls-damaged", "dlq ls damaged.jsonl", 1},
		{"ls-missing", "dlq ls missing.jsonl", 1},
		{"ls-no-file", "dlq ls", 2},
		{"ls-two-files", "dlq ls dlq.jsonl damaged.jsonl", 1},
		{"ls-unknown-flag", "dlq ls --json dlq.jsonl", 2},
		{"stats", "dlq stats dlq.jsonl", 0},
		{"stats-damaged", "dlq stats damaged.jsonl", 1},
		{"stats-missing", "dlq stats missing.jsonl", 1},
		{"show", "dlq show dlq.jsonl 3", 0},
		{"show-unencodable-item", "dlq show dlq.jsonl 6", 0},
		{"show-past-the-end", "dlq show dlq.jsonl 99", 1},
		{"show-not-a-number", "dlq show dlq.jsonl three", 2},
		{"show-corrupt-line", "dlq show damaged.jsonl 3", 1},
		{"show-after-corrupt-line", "dlq show damaged.jsonl 4", 0},
		{"show-torn-line", "dlq show damaged.jsonl 5", 1},
		{"filter-no-output", "dlq filter dlq.jsonl --node price", 2},
		{"filter-unknown-flag", "dlq filter dlq.jsonl --colour red -o x.jsonl", 2},
		{"filter-existing-output", "dlq filter dlq.jsonl -o exists.jsonl", 1},
		{"filter-missing-input", "dlq filter missing.jsonl -o new.jsonl", 1},
		{"filter-help", "dlq filter -h", 0},
		{"ls-node", "dlq ls --node price dlq.jsonl", 0},
		{"ls-rotated", "dlq ls --rotated rows.jsonl", 0},
		{"stats-rows", "dlq stats rows.jsonl", 0},
		{"stats-rotated-by-reason-and-run", "dlq stats --rotated --by reason,run rows.jsonl", 0},
		{"stats-by-error-top-2", "dlq stats --by error --top 2 --rotated rows.jsonl", 0},
		{"stats-two-files", "dlq stats --by node dlq.jsonl rows.jsonl", 0},
		{"stats-bad-by", "dlq stats --by colour dlq.jsonl", 2},
		{"filter-to-stdout", "dlq filter --node enrich -o - rows.jsonl", 0},
		{"redrive-dry-run", "dlq redrive --amqp amqp://broker.example/prod --queue orders --dry-run --rotated rows.jsonl", 0},
		{"redrive-no-target", "dlq redrive --amqp amqp://localhost rows.jsonl", 2},
		{"redrive-no-url", "dlq redrive --queue q rows.jsonl", 2},
		{"rabbitmq-no-subcommand", "rabbitmq", 2},
		{"requeue-missing-flags", "rabbitmq requeue --from a", 2},
		{"requeue-same-queue", "rabbitmq requeue --amqp amqp://localhost --from a --to a", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := sluice(t, dir, strings.Fields(tt.args)...)
			assert.Equal(t, tt.exit, code)
			golden(t, tt.name, transcript(tt.args, code, stdout, stderr))
		})
	}
	_, err := os.Stat(filepath.Join(dir, "new.jsonl"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a missing input creates no output")
}

// transcript is what a golden file holds: the command, its exit code and
// what it printed.
func transcript(args string, code int, stdout, stderr string) string {
	return fmt.Sprintf("$ sluice %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", args, code, stdout, stderr)
}

func TestCLIFilterCutsAFileForReDrive(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	args := "dlq filter dlq.jsonl --node price --error-contains 503 -o redrive.jsonl"
	code, stdout, stderr := sluice(t, dir, strings.Fields(args)...)
	require.Equal(t, 0, code, stderr)
	out := transcript(args, code, stdout, stderr)
	code, stdout, stderr = sluice(t, dir, "dlq", "ls", "redrive.jsonl")
	require.Equal(t, 0, code, stderr)
	golden(t, "filter", out+transcript("dlq ls redrive.jsonl", code, stdout, stderr))

	// The lines are copied unchanged.
	in, err := os.ReadFile(filepath.Join(dir, "dlq.jsonl"))
	require.NoError(t, err)
	cut, err := os.ReadFile(filepath.Join(dir, "redrive.jsonl"))
	require.NoError(t, err)
	lines := strings.SplitAfter(string(in), "\n")
	assert.Equal(t, lines[0]+lines[1], string(cut))

	// deadletter reads the cut, and re-drives it.
	var ids []int
	for env, err := range deadletter.ReadFile(filepath.Join(dir, "redrive.jsonl")) {
		require.NoError(t, err)
		assert.Equal(t, "price", env.OriginNode)
	}
	src := deadletter.Source[item](filepath.Join(dir, "redrive.jsonl"))
	require.NoError(t, src.Run(t.Context(), emitFunc[item](func(it item) { ids = append(ids, it.ID) })))
	assert.Equal(t, []int{1, 2}, ids)

	// --node matches the decision node too; no flag keeps everything.
	code, stdout, _ = sluice(t, dir, "dlq", "filter", "--node", "route", "dlq.jsonl", "-o", "route.jsonl")
	require.Equal(t, 0, code)
	assert.Equal(t, "1 of 6 envelopes written to route.jsonl\n", stdout)
	code, stdout, _ = sluice(t, dir, "dlq", "filter", "dlq.jsonl", "-o", "all.jsonl")
	require.Equal(t, 0, code)
	assert.Equal(t, "6 of 6 envelopes written to all.jsonl\n", stdout)
}

func TestCLIFilterDamagedInput(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	args := "dlq filter damaged.jsonl -o good.jsonl"
	code, stdout, stderr := sluice(t, dir, strings.Fields(args)...)
	assert.Equal(t, 1, code, "bad lines are reported")
	golden(t, "filter-damaged", transcript(args, code, stdout, stderr))
	n := 0
	for _, err := range deadletter.ReadFile(filepath.Join(dir, "good.jsonl")) {
		require.NoError(t, err)
		n++
	}
	assert.Equal(t, 3, n, "the good lines are kept")
}

// emitFunc is an Emitter that hands items to a function.
type emitFunc[T any] func(T)

func (f emitFunc[T]) Emit(_ context.Context, item T) error { f(item); return nil }

func (f emitFunc[T]) EmitAt(_ context.Context, item T, _ []byte) error {
	f(item)
	return nil
}

func (f emitFunc[T]) EmitTracked(_ context.Context, item T, done func(node.Outcome)) error {
	f(item)
	done(node.Delivered)
	return nil
}

// -o /dev/stdout writes to standard output even when that is a regular
// file; --by twice counts once.
func TestCLIFilterToStdoutFileAndStatsByTwice(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	out, err := os.Create(filepath.Join(dir, "out.txt"))
	require.NoError(t, err)
	cmd := exec.Command(bin, "dlq", "filter", "--node", "price", "-o", "/dev/stdout", "dlq.jsonl")
	cmd.Dir, cmd.Stdout = dir, out
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.NoError(t, out.Close())
	data, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(string(data), "\n"))
	assert.Equal(t, "3 of 6 envelopes written to /dev/stdout\n", stderr.String())

	code, stdout, _ := sluice(t, dir, "dlq", "stats", "--by", "node,node", "dlq.jsonl")
	require.Equal(t, 0, code)
	assert.Equal(t, 1, strings.Count(stdout, "COUNT  NODE"))
	assert.Contains(t, stdout, "3      price\n")
}
