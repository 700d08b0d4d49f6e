//go:build unix

package file_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// The package reads "a file": one that is not regular (a named pipe, as a
// shell's process substitution or /dev/stdin gives) is read as a stream
// (Size unknown), not failed by the count at Open.
func TestLinesReadsANamedPipe(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			wrote <- err
			return
		}
		_, err = w.WriteString("a\nb\n")
		wrote <- errors.Join(err, w.Close())
	}()
	r := &recorder[string]{}
	err := file.Lines(path).Run(context.Background(), r)
	<-wrote
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, r.items)
}

// Opening a named pipe waits for a writer: the context ends the wait.
func TestOpenOfANamedPipeWithoutAWriterEndsWithTheContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := file.Lines(path)
	assert.ErrorIs(t, src.Open(ctx), context.Canceled)
	assert.Equal(t, int64(-1), src.Size())
}

// A run waiting for a pipe's writer to write ends with the context.
func TestRunOfANamedPipeWhoseWriterWaitsEndsWithTheContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, _ = w.WriteString("a\n")
		}
		opened <- w
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := file.Lines(path)
	require.NoError(t, src.Open(ctx))
	assert.Equal(t, int64(-1), src.Size(), "a pipe's size is unknown")
	var got []string
	err := src.Run(ctx, emitFunc[string](func(item string) {
		got = append(got, item)
		cancel() // the writer writes no more and keeps the pipe open
	}))
	w := <-opened
	require.NotNil(t, w)
	require.NoError(t, w.Close())
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"a"}, got)
}
