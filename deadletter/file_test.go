package deadletter_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

func TestFileRoundTripsEveryField(t *testing.T) {
	t.Parallel()
	// Times in a zone other than UTC and with a monotonic reading: what
	// comes back is the same instant, in UTC.
	zone := time.FixedZone("CET", 3600)
	first := time.Now().In(zone)
	in := deadletter.Envelope{
		Item:          map[string]any{"id": 7.0, "tags": []any{"a", "<b>&"}},
		Err:           &resilience.RetryExhaustedError{Node: "store", Kind: resilience.ItemRetry, Attempts: 4, Err: errors.New("db down")},
		Pipeline:      "orders",
		RunID:         "run-42",
		OriginNode:    "store",
		DecisionNode:  "route",
		CorrelationID: "order-7",
		Attempts:      4,
		History: []deadletter.Attempt{
			{Time: first, Layer: resilience.ItemRetry, Retry: 0, Err: "db down"},
			{Time: first.Add(time.Second), Layer: resilience.NodeRestart, Retry: 1, Delay: time.Second, Err: "db down", Node: "price"},
			{Time: first.Add(3 * time.Second), Layer: resilience.NodeRetry, Retry: 2, Delay: 2 * time.Second, Err: "db down"},
			{Time: first.Add(4 * time.Second), Layer: resilience.RetryKind(7), Retry: 3, Delay: time.Nanosecond, Err: "db down"},
		},
		FirstFailure: first,
		LastFailure:  first.Add(4 * time.Second),
	}
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), in))
	require.NoError(t, f.Close())

	envs, errs := readBack(t, path)
	require.Empty(t, errs)
	require.Len(t, envs, 1)
	out := envs[0]

	assert.JSONEq(t, `{"id":7,"tags":["a","<b>&"]}`, string(out.Item.(json.RawMessage)))
	assert.Equal(t, in.Err.Error(), out.ErrText, "ErrText is taken from Err")
	require.Error(t, out.Err)
	assert.Equal(t, in.Err.Error(), out.Err.Error())
	assert.Equal(t, in.Pipeline, out.Pipeline)
	assert.Equal(t, in.RunID, out.RunID)
	assert.Equal(t, in.OriginNode, out.OriginNode)
	assert.Equal(t, in.DecisionNode, out.DecisionNode)
	assert.Equal(t, in.CorrelationID, out.CorrelationID)
	assert.Equal(t, in.Attempts, out.Attempts)
	assert.Empty(t, out.ItemError)
	assert.Empty(t, out.ItemText)
	assertSameTime(t, in.FirstFailure, out.FirstFailure)
	assertSameTime(t, in.LastFailure, out.LastFailure)
	require.Len(t, out.History, len(in.History))
	for i, a := range in.History {
		b := out.History[i]
		assertSameTime(t, a.Time, b.Time)
		assert.Equal(t, a.Layer, b.Layer, "history[%d]", i)
		assert.Equal(t, a.Retry, b.Retry, "history[%d]", i)
		assert.Equal(t, a.Delay, b.Delay, "history[%d]", i)
		assert.Equal(t, a.Err, b.Err, "history[%d]", i)
		assert.Equal(t, a.Node, b.Node, "history[%d]", i)
	}

	// The line is readable by people and tools: HTML characters are not
	// escaped, and the layer is a name.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"<b>&"`)
	assert.Contains(t, string(data), `"layer":"node_restart"`)
	assert.True(t, strings.HasSuffix(string(data), "}\n"))
	assert.Equal(t, 1, strings.Count(string(data), "\n"))
}

func assertSameTime(t *testing.T, want, got time.Time) {
	t.Helper()
	assert.True(t, want.Equal(got), "want %s, got %s", want, got)
	assert.Equal(t, time.UTC, got.Location())
}

func TestFileKeepsErrTextOverErr(t *testing.T) {
	t.Parallel()
	env := sampleEnvelope(1)
	env.ErrText = "the text the engine chose"
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), env))
	require.NoError(t, f.Close())
	envs, errs := readBack(t, path)
	require.Empty(t, errs)
	require.Len(t, envs, 1)
	assert.Equal(t, "the text the engine chose", envs[0].ErrText)
	assert.EqualError(t, envs[0].Err, "the text the engine chose")
}

func TestFileRoundTripsZeroEnvelope(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{}))
	require.NoError(t, f.Close())
	envs, errs := readBack(t, path)
	require.Empty(t, errs)
	require.Len(t, envs, 1)
	assert.Equal(t, json.RawMessage("null"), envs[0].Item)
	assert.NoError(t, envs[0].Err)
	assert.True(t, envs[0].FirstFailure.IsZero())
	assert.Empty(t, envs[0].History)
}

func TestFileWritesItemsThatCannotBeEncoded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		item      any
		encoder   func(any) ([]byte, error)
		wantError string
		wantText  string
	}{
		{name: "channel", item: make(chan int), wantError: "json: unsupported type: chan int", wantText: "(chan int)"},
		{name: "NaN", item: math.NaN(), wantError: "json: unsupported value: NaN", wantText: "NaN"},
		{
			name: "encoder error", item: order{ID: 3},
			encoder:   func(any) ([]byte, error) { return nil, errors.New("no codec for order") },
			wantError: "no codec for order", wantText: "{ID:3 Total:}",
		},
		{
			name: "encoder panic", item: order{ID: 4},
			encoder:   func(any) ([]byte, error) { panic("boom") },
			wantError: "encoder panicked: boom", wantText: "{ID:4 Total:}",
		},
		{
			name: "encoder returns no JSON", item: []byte{0xff, '\n'},
			encoder:   func(v any) ([]byte, error) { return v.([]byte), nil },
			wantError: "encoder returned invalid JSON", wantText: "[255 10]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts []deadletter.FileOption
			if tt.encoder != nil {
				opts = append(opts, deadletter.WithEncoder(tt.encoder))
			}
			path := filepath.Join(t.TempDir(), "dlq.jsonl")
			f, err := deadletter.OpenFile(path, opts...)
			require.NoError(t, err)
			env := sampleEnvelope(1)
			env.Item = tt.item
			require.NoError(t, f.Write(t.Context(), env), "an item that cannot be encoded still lands")
			require.NoError(t, f.Close())

			envs, errs := readBack(t, path)
			require.Empty(t, errs)
			require.Len(t, envs, 1)
			assert.Equal(t, json.RawMessage("null"), envs[0].Item)
			assert.Equal(t, tt.wantError, envs[0].ItemError)
			assert.Contains(t, envs[0].ItemText, tt.wantText)
			assert.Equal(t, "orders", envs[0].Pipeline, "the rest of the envelope is kept")
			assert.Equal(t, env.Err.Error(), envs[0].ErrText)

			// Written back as read, the envelope keeps its record.
			again := filepath.Join(t.TempDir(), "again.jsonl")
			g, err := deadletter.OpenFile(again)
			require.NoError(t, err)
			require.NoError(t, g.Write(t.Context(), envs[0]))
			require.NoError(t, g.Close())
			envs2, errs := readBack(t, again)
			require.Empty(t, errs)
			require.Len(t, envs2, 1)
			assert.Equal(t, envs[0].ItemError, envs2[0].ItemError)
			assert.Equal(t, envs[0].ItemText, envs2[0].ItemText)
		})
	}
}

func TestFileCustomEncoder(t *testing.T) {
	t.Parallel()
	encode := func(v any) ([]byte, error) {
		return json.Marshal(base64.StdEncoding.EncodeToString(v.([]byte)))
	}
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path, deadletter.WithEncoder(encode))
	require.NoError(t, err)
	env := sampleEnvelope(1)
	env.Item = []byte{0, 1, 0xfe, 0xff}
	require.NoError(t, f.Write(t.Context(), env))
	require.NoError(t, f.Close())
	envs, errs := readBack(t, path)
	require.Empty(t, errs)
	require.Len(t, envs, 1)
	assert.Equal(t, json.RawMessage(`"AAH+/w=="`), envs[0].Item)
}

func TestFileConcurrentWriters(t *testing.T) {
	t.Parallel()
	const writers, each = 8, 50
	policies := map[string][]deadletter.FileOption{
		"fsync every write": nil,
		// The real clock here: the interval is short, and the test waits
		// for the sink, not for a duration of its own.
		"group commit": {deadletter.WithGroupCommit(200 * time.Microsecond)},
	}
	for name, opts := range policies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "dlq.jsonl")
			f, err := deadletter.OpenFile(path, opts...)
			require.NoError(t, err)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						assert.NoError(t, f.Write(t.Context(), sampleEnvelope(w*each+i)))
					}
				})
			}
			wg.Wait()
			stats := f.Stats()
			require.NoError(t, f.Close())

			assert.Equal(t, int64(writers*each), stats.Writes)
			assert.LessOrEqual(t, stats.Syncs, stats.Writes)
			assert.Positive(t, stats.Syncs)
			envs, errs := readBack(t, path)
			require.Empty(t, errs)
			assert.ElementsMatch(t, seq(writers*each), itemIDs(t, envs))
		})
	}
}

// seq returns 0..n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestFileWriteAfterClose(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]deadletter.FileOption{nil, {deadletter.WithGroupCommit(time.Hour)}} {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		f, err := deadletter.OpenFile(path, opts...)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		err = f.Write(t.Context(), sampleEnvelope(1))
		require.ErrorIs(t, err, deadletter.ErrClosed)
		assert.Contains(t, err.Error(), path)
		assert.NoError(t, f.Close(), "a second Close")
	}
}

func TestFileWriteWithDoneContextWritesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = f.Write(ctx, sampleEnvelope(1))
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, strings.HasPrefix(err.Error(), "deadletter: "+path), err.Error())
	require.NoError(t, f.Close())
	envs, errs := readBack(t, path)
	assert.Empty(t, envs)
	assert.Empty(t, errs)
}

func TestOpenFileEndsATornLineBeforeAppending(t *testing.T) {
	t.Parallel()
	path := writeFile(t, 2)
	torn := `{"item":{"id":99},"err`
	appendTo(t, path, torn)

	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), sampleEnvelope(2)))
	require.NoError(t, f.Close())

	envs, errs := readBack(t, path)
	assert.Equal(t, []int{0, 1, 2}, itemIDs(t, envs), "the new envelope is whole")
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], deadletter.ErrCorruptLine, "the torn line is now a line of its own")
	var le *deadletter.LineError
	require.ErrorAs(t, errs[0], &le)
	assert.Equal(t, 3, le.Line)
}

func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(text)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestOpenFileRejectsBadOptions(t *testing.T) {
	t.Parallel()
	tests := map[string]deadletter.FileOption{
		"nil encoder":       deadletter.WithEncoder(nil),
		"negative interval": deadletter.WithGroupCommit(-time.Second),
		"nil clock":         deadletter.WithClock(nil),
		"negative size":     deadletter.WithMaxBytes(-1),
	}
	for name, opt := range tests {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		_, err := deadletter.OpenFile(path, opt)
		require.Error(t, err, name)
		assert.True(t, strings.HasPrefix(err.Error(), "deadletter: open "+path+": "), err.Error())
		_, statErr := os.Stat(path)
		assert.ErrorIs(t, statErr, fs.ErrNotExist, "%s: no file created", name)
	}
}

func TestOpenFileErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "dlq.jsonl")
	_, err := deadletter.OpenFile(path)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Equal(t, fmt.Sprintf("deadletter: open %s: no such file or directory", path), err.Error())
}

func TestOpenFileCreatesPrivateFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for perm, opts := range map[fs.FileMode][]deadletter.FileOption{
		0o600: nil,
		0o640: {deadletter.WithPerm(0o640)},
	} {
		path := filepath.Join(dir, perm.String())
		f, err := deadletter.OpenFile(path, opts...)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		info, err := os.Stat(path)
		require.NoError(t, err)
		// The umask can only take bits away.
		assert.Zero(t, info.Mode().Perm()&^perm, "created %s", info.Mode().Perm())
		assert.Equal(t, path, f.Path())
	}
}
