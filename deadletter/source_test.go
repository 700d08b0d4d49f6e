package deadletter_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
)

// collector is an Emitter that keeps what it is given, and fails with err
// once it holds limit items when limit is above 0.
type collector[T any] struct {
	items []T
	limit int
	err   error
}

func (c *collector[T]) Emit(_ context.Context, item T) error {
	if c.limit > 0 && len(c.items) == c.limit {
		return c.err
	}
	c.items = append(c.items, item)
	return nil
}

func (c *collector[T]) EmitAt(ctx context.Context, item T, _ []byte) error {
	return c.Emit(ctx, item)
}

func (c *collector[T]) EmitTracked(ctx context.Context, item T, done func(node.Outcome)) error {
	err := c.Emit(ctx, item)
	if err != nil {
		done(node.Failed)
	} else {
		done(node.Delivered)
	}
	return err
}

func TestSourceEmitsTheItemsInOrder(t *testing.T) {
	t.Parallel()
	path := writeFile(t, 4)
	var out collector[order]
	require.NoError(t, deadletter.Source[order](path).Run(t.Context(), &out))
	assert.Equal(t, []order{{0, "9.99"}, {1, "9.99"}, {2, "9.99"}, {3, "9.99"}}, out.items)

	// Run again reads the file from the start.
	var again collector[order]
	require.NoError(t, deadletter.Source[order](path).Run(t.Context(), &again))
	assert.Equal(t, out.items, again.items)
}

// writeEnvelopes writes envs to a new file and returns its path.
func writeEnvelopes(t *testing.T, envs ...deadletter.Envelope) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	for _, env := range envs {
		require.NoError(t, f.Write(t.Context(), env))
	}
	require.NoError(t, f.Close())
	return path
}

func TestSourceStopsAtAnItemThatDoesNotDecode(t *testing.T) {
	t.Parallel()
	bad := sampleEnvelope(1)
	bad.Item = map[string]any{"id": "one"}
	bad.ItemType = deadletter.TypeOf(order{}) // it says it is one
	path := writeEnvelopes(t, sampleEnvelope(0), bad, sampleEnvelope(2))

	var out collector[order]
	err := deadletter.Source[order](path).Run(t.Context(), &out)
	require.ErrorIs(t, err, deadletter.ErrUndecodableItem)
	var le *deadletter.LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 2, le.Line)
	var typeErr *json.UnmarshalTypeError
	assert.ErrorAs(t, err, &typeErr, "the decoder's error is kept")
	assert.Contains(t, err.Error(), path+":2 ")
	assert.Contains(t, err.Error(), "into deadletter_test.order")
	assert.Equal(t, []order{{0, "9.99"}}, out.items, "everything before the line was emitted")
}

func TestSourceRefusesAnItemThatWasNotEncoded(t *testing.T) {
	t.Parallel()
	bad := sampleEnvelope(1)
	bad.Item = make(chan int)
	path := writeEnvelopes(t, bad)
	err := deadletter.Source[order](path).Run(t.Context(), &collector[order]{})
	require.ErrorIs(t, err, deadletter.ErrUndecodableItem)
	assert.Contains(t, err.Error(), "the item was not encoded when it was dead-lettered: json: unsupported type: chan int")
}

func TestSourceStopsAtATornLine(t *testing.T) {
	t.Parallel()
	path := writeFile(t, 2)
	appendTo(t, path, `{"item":{"id":`)
	var out collector[order]
	err := deadletter.Source[order](path).Run(t.Context(), &out)
	require.ErrorIs(t, err, deadletter.ErrTornLine)
	assert.Len(t, out.items, 2)
}

func TestSourceSkipsBadLinesWhenAsked(t *testing.T) {
	t.Parallel()
	bad := sampleEnvelope(1)
	bad.Item = "not an order"
	path := writeEnvelopes(t, sampleEnvelope(0), bad, sampleEnvelope(2))
	appendTo(t, path, "garbage\n"+`{"item":{"id":`)

	var skipped []*deadletter.LineError
	var out collector[order]
	src := deadletter.Source[order](path, deadletter.WithSkipBadLines(func(le *deadletter.LineError) { skipped = append(skipped, le) }))
	require.NoError(t, src.Run(t.Context(), &out))
	assert.Equal(t, []order{{0, "9.99"}, {2, "9.99"}}, out.items)
	require.Len(t, skipped, 3)
	assert.ErrorIs(t, skipped[0], deadletter.ErrUndecodableItem)
	assert.Equal(t, 2, skipped[0].Line)
	assert.ErrorIs(t, skipped[1], deadletter.ErrCorruptLine)
	assert.Equal(t, 4, skipped[1].Line)
	assert.ErrorIs(t, skipped[2], deadletter.ErrTornLine)
	assert.Equal(t, 5, skipped[2].Line)

	assert.PanicsWithValue(t, "sluice: deadletter.WithSkipBadLines: nil report function", func() { deadletter.WithSkipBadLines(nil) })
}

func TestSourceReturnsTheEmitterError(t *testing.T) {
	t.Parallel()
	stop := errors.New("run is stopping")
	out := collector[order]{limit: 1, err: stop}
	err := deadletter.Source[order](writeFile(t, 3)).Run(t.Context(), &out)
	assert.ErrorIs(t, err, stop)
	assert.Len(t, out.items, 1)
}

func TestSourceWithDecoder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path, deadletter.WithEncoder(func(v any) ([]byte, error) {
		return json.Marshal(base64.StdEncoding.EncodeToString(v.([]byte)))
	}))
	require.NoError(t, err)
	env := sampleEnvelope(0)
	env.Item = []byte("raw\x00bytes")
	require.NoError(t, f.Write(t.Context(), env))
	require.NoError(t, f.Close())

	decode := func(data []byte, v any) error {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		*v.(*[]byte) = b
		return err
	}
	var out collector[[]byte]
	require.NoError(t, deadletter.Source[[]byte](path, deadletter.WithDecoder(decode)).Run(t.Context(), &out))
	assert.Equal(t, [][]byte{[]byte("raw\x00bytes")}, out.items)

	err = deadletter.Source[[]byte](path, deadletter.WithDecoder(nil)).Run(t.Context(), &out)
	assert.EqualError(t, err, "deadletter: source "+path+": WithDecoder: nil decoder")
}

func TestSourceIncludeRotated(t *testing.T) {
	t.Parallel()
	path := writeFile(t, 5, deadletter.WithMaxBytes(1))
	var out collector[order]
	require.NoError(t, deadletter.Source[order](path, deadletter.WithRotated()).Run(t.Context(), &out))
	assert.Len(t, out.items, 5)
	for i, o := range out.items {
		assert.Equal(t, i, o.ID)
	}
}

func TestSourceMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.jsonl")
	err := deadletter.Source[order](path).Run(t.Context(), &collector[order]{})
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, statErr := os.Stat(path)
	assert.ErrorIs(t, statErr, fs.ErrNotExist)
}
