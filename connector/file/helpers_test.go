package file_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
)

// recorder is an emitter that keeps each item with its position; with
// failAt > 0 the emit of that item (1-based) fails, as a stopping run's
// would.
type recorder[T any] struct {
	items  []T
	pos    [][]byte
	failAt int
	calls  int
}

var errStopped = errors.New("run stopping")

func (r *recorder[T]) Emit(ctx context.Context, item T) error {
	return errors.New("Emit: the source must use EmitAt")
}

func (r *recorder[T]) EmitTracked(context.Context, T, func(node.Outcome)) error {
	return errors.New("EmitTracked: the source must use EmitAt")
}

func (r *recorder[T]) EmitAt(ctx context.Context, item T, pos []byte) error {
	r.calls++
	if r.failAt > 0 && r.calls == r.failAt {
		return errStopped
	}
	r.items = append(r.items, item)
	r.pos = append(r.pos, pos)
	return nil
}

// write writes content to a new file named name, gzip-compressed with zip.
func write(t testing.TB, name, content string, zip bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	data := []byte(content)
	if zip {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, err := w.Write(data)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		data = b.Bytes()
	}
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// source is what the tests need of a file source.
type source[T any] interface {
	node.Source[T]
	node.Resumable
	node.Opener
	node.Sized
}

// runFrom resumes src at pos and runs it to the end.
func runFrom[T any](t testing.TB, src source[T], pos []byte) *recorder[T] {
	t.Helper()
	require.NoError(t, src.Resume(pos))
	r := &recorder[T]{}
	require.NoError(t, src.Run(context.Background(), r))
	return r
}

// deadletterMemory gives src a memory dead-letter sink.
func deadletterMemory(src deadletter.DeadLetterWriter) *deadletter.Memory {
	dlq := deadletter.NewMemory(100)
	src.UseDeadLetter(dlq, deadletter.Envelope{OriginNode: "src", DecisionNode: "src"})
	return dlq
}

// emitFunc is an emitter that calls itself with each item.
type emitFunc[T any] func(item T)

func (f emitFunc[T]) Emit(context.Context, T) error {
	return errors.New("Emit: the source must use EmitAt")
}

func (f emitFunc[T]) EmitTracked(context.Context, T, func(node.Outcome)) error {
	return errors.New("EmitTracked: the source must use EmitAt")
}

func (f emitFunc[T]) EmitAt(_ context.Context, item T, _ []byte) error {
	f(item)
	return nil
}
