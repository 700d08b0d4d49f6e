package rabbitmq_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKillConsumer kills a consumer process with SIGKILL while it holds
// unacked messages, one of them already written to the sink, and lets a
// second process finish the queue. Every message reaches the sink at least
// once and none is lost; the message written but not acked is written
// again, which is why sinks fed by a broker must be idempotent.
func TestKillConsumer(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	const n, stallAfter = 3000, 1000
	a.publish(q, ids(n)...)
	out := filepath.Join(t.TempDir(), "ids")
	env := map[string]string{childURL: a.url, childQueue: q, childOut: out, childPrefetch: "50"}

	env[childStall] = "1000"
	first := startChild(t, env)
	first.expect(ctx, t, "stalled")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	var exit *exec.ExitError
	require.ErrorAs(t, first.wait(ctx), &exit)
	assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	require.Len(t, readIDs(t, out), stallAfter, "the first process wrote %d ids before it hung", stallAfter)

	delete(env, childStall)
	env[childTotal] = "3000"
	second := startChild(t, env)
	require.NoError(t, second.wait(ctx))

	counts := readIDs(t, out)
	require.Len(t, counts, n, "no message is lost")
	dups := 0
	for _, id := range ids(n) {
		require.GreaterOrEqual(t, counts[id], 1, "message %s", id)
		dups += counts[id] - 1
	}
	assert.GreaterOrEqual(t, dups, 1, "the message the killed process wrote but never acked was delivered again")
	assert.LessOrEqual(t, dups, 50, "only unacked messages, at most the prefetch, are delivered twice")
	ready, consumers := a.depth(q)
	assert.Zero(t, ready)
	assert.Zero(t, consumers)
}

// TestCompetingConsumers runs two consumer processes on one queue. Each
// holds its first message until both have one, which proves both consume;
// together they process every message exactly once (no process fails, so
// nothing is delivered twice).
func TestCompetingConsumers(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	const n = 2000
	a.publish(q, ids(n)...)
	dir := t.TempDir()
	outs := []string{filepath.Join(dir, "one"), filepath.Join(dir, "two")}
	var procs []*childProc
	for _, out := range outs {
		procs = append(procs, startChild(t, map[string]string{
			childURL: a.url, childQueue: q, childOut: out, childPrefetch: "1", childGate: "1", childReport: "1",
		}))
	}

	seen := map[string]bool{}
	firsts := 0
	handle := func(line string, ok bool) {
		require.True(t, ok, "a consumer ended early")
		switch {
		case line == "first":
			if firsts++; firsts == len(procs) {
				for _, p := range procs {
					require.NoError(t, p.stdin.Close())
				}
			}
		case strings.HasPrefix(line, "did "):
			seen[strings.TrimPrefix(line, "did ")] = true
		}
	}
	for len(seen) < n {
		select {
		case line, ok := <-procs[0].lines:
			handle(line, ok)
		case line, ok := <-procs[1].lines:
			handle(line, ok)
		case <-ctx.Done():
			require.FailNow(t, "timed out", "%d of %d messages processed", len(seen), n)
		}
	}
	for _, p := range procs {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range procs {
		require.NoError(t, p.wait(ctx), "a stopped consumer exits cleanly")
	}

	counts := readIDs(t, outs...)
	require.Len(t, counts, n)
	for id, c := range counts {
		assert.Equal(t, 1, c, "message %s", id)
	}
	for _, out := range outs {
		assert.NotEmpty(t, readIDs(t, out), "both consumers processed messages")
	}
	ready, consumers := a.depth(q)
	assert.Zero(t, ready)
	assert.Zero(t, consumers)
}
