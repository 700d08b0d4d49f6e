package slogobserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errFlaky = resilience.MarkTransient(errors.New("flaky"))
	errBad   = errors.New("bad item")
	start    = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
)

func ints(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// logBuffer is a buffer that JSON handlers write to and tests read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records decodes every record written so far.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		out = append(out, r)
	}
	return out
}

func logger(level slog.Level) (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: level})), b
}

// byNode groups records by node, in the order each node wrote them, with
// run_id checked and removed; the times of lifecycle records, which depend
// on scheduling, are removed too.
func byNode(t *testing.T, recs []map[string]any, runID string) map[string][]map[string]any {
	t.Helper()
	out := make(map[string][]map[string]any)
	for _, r := range recs {
		assert.Equal(t, runID, r["run_id"])
		delete(r, "run_id")
		switch r["msg"] {
		case slogobserver.MsgNodeStarted, slogobserver.MsgNodeCompleted, slogobserver.MsgNodeStopped, slogobserver.MsgNodeFailed:
			delete(r, "time")
		}
		n, _ := r["node"].(string)
		out[n] = append(out[n], r)
	}
	return out
}

func at(d time.Duration) string { return start.Add(d).Format(time.RFC3339Nano) }

func TestRecordsOfAScriptedRun(t *testing.T) {
	t.Parallel()
	l, buf := logger(slog.LevelDebug)
	clock := clockwork.NewFakeClockAt(start)
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(slogobserver.New(l)),
		pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.NodeRetry.MaxRetries = 0
		}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
	price := pipeline.Transform[int, int](b, "price", src, pipelinetest.NewFaults(map[int][]error{3: {errFlaky, errFlaky}}))
	ship := pipeline.Transform[int, int](b, "ship", price, pipelinetest.FailAlways(errFlaky, 6),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.OnItemFailure = resilience.DeadLetter
		}))
	check := pipeline.Transform[int, int](b, "check", ship, pipelinetest.FailAlways(errBad, 8),
		pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	pipeline.Sink(b, "store", check, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	require.NoError(t, err)

	lifecycle := func(n string) (started, completed map[string]any) {
		return map[string]any{"level": "INFO", "msg": "node started", "pipeline": "orders", "node": n},
			map[string]any{"level": "INFO", "msg": "node completed", "pipeline": "orders", "node": n}
	}
	with := func(n string, events ...map[string]any) []map[string]any {
		s, c := lifecycle(n)
		return append(append([]map[string]any{s}, events...), c)
	}
	// Item 3 fails at once and after its first retry's second; ship's
	// call of item 6 comes once price lets item 3 through, two seconds in.
	assert.Equal(t, map[string][]map[string]any{
		"src": with("src"),
		"price": with("price",
			map[string]any{"time": at(0), "level": "DEBUG", "msg": "retry", "pipeline": "orders", "node": "price",
				"kind": "item_retry", "attempt": 1.0, "delay": 1e9, "error": "flaky"},
			map[string]any{"time": at(time.Second), "level": "DEBUG", "msg": "retry", "pipeline": "orders", "node": "price",
				"kind": "item_retry", "attempt": 2.0, "delay": 1e9, "error": "flaky"}),
		"ship": with("ship",
			map[string]any{"time": at(2 * time.Second), "level": "DEBUG", "msg": "retry", "pipeline": "orders", "node": "ship",
				"kind": "item_retry", "attempt": 1.0, "delay": 1e9, "error": "flaky"},
			map[string]any{"time": at(3 * time.Second), "level": "WARN", "msg": "retries exhausted", "pipeline": "orders", "node": "ship",
				"kind": "item_retry", "attempts": 2.0, "error": "flaky", "limit": "count", "reason": "flaky"},
			map[string]any{"time": at(3 * time.Second), "level": "WARN", "msg": "item dead-lettered", "pipeline": "orders", "node": "ship",
				"origin_node": "ship", "attempts": 2.0, "error": "resilience: item_retry exhausted after 2 attempts: flaky",
				"reason": "resilience: item_retry exhausted after # attempts: flaky"}),
		"check": with("check",
			map[string]any{"time": at(3 * time.Second), "level": "WARN", "msg": "item dropped", "pipeline": "orders", "node": "check",
				"attempts": 1.0, "error": "bad item", "reason": "bad item"}),
		"store": with("store"),
	}, byNode(t, buf.records(t), res.RunID))
}

func TestLevels(t *testing.T) {
	t.Parallel()
	l, buf := logger(slog.LevelInfo)
	clock := clockwork.NewFakeClock()
	b := pipeline.New("levels", pipeline.WithClock(clock), pipeline.WithObserver(slogobserver.New(l)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
		}))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(3)...)),
		pipelinetest.NewFaults(map[int][]error{1: {errFlaky}}))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)
	_, err = pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	require.NoError(t, err)
	for _, r := range buf.records(t) {
		assert.Equal(t, "INFO", r["level"], "a retry logs at DEBUG, below this logger's level: %v", r)
	}
	assert.Len(t, buf.records(t), 6, "three nodes started and completed")
}

func TestAFailedRunLogsOneError(t *testing.T) {
	t.Parallel()
	l, buf := logger(slog.LevelInfo)
	b := pipeline.New("fails", pipeline.WithObserver(slogobserver.New(l)),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0; o.NodeRetry.MaxRetries = 0 }))
	// The source emits forever, so that it is still running when call fails.
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := 0; ; i++ {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
	})
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", src), pipelinetest.FailAlways(errBad, 100))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, errBad)

	levels := make(map[string]string)
	for _, r := range buf.records(t) {
		if r["msg"] != slogobserver.MsgNodeStarted {
			levels[r["node"].(string)] = r["level"].(string) + " " + r["msg"].(string)
		}
	}
	assert.Equal(t, map[string]string{
		"call": "ERROR node failed",
		"src":  "INFO node stopped",
		"sink": "INFO node stopped",
	}, levels)
}

func TestCancellationIsNotAnError(t *testing.T) {
	t.Parallel()
	l, buf := logger(slog.LevelInfo)
	ctx, cancel := context.WithCancel(t.Context())
	b := pipeline.New("cancelled", pipeline.WithObserver(slogobserver.New(l)))
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	for _, r := range buf.records(t) {
		assert.Equal(t, "INFO", r["level"], "%v", r)
		if r["msg"] != slogobserver.MsgNodeStarted {
			assert.Equal(t, slogobserver.MsgNodeStopped, r["msg"])
		}
	}
}

func TestNilLoggerIsTheDefault(t *testing.T) {
	t.Parallel()
	assert.NotNil(t, slogobserver.New(nil))
}
