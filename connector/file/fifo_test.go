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

// A pipe cannot seek: a resumed source reads forward to its position. A
// CSV source with a header, which it reads again from the file's start,
// cannot resume in a pipe: that is an error, not a wait for a writer.
func TestANamedPipeResumesAtAPosition(t *testing.T) {
	t.Parallel()
	content := "id,n\n1,a\n2,b\n3,c\n"
	all := runFrom(t, file.Lines(write(t, "in.csv", content, false)), nil)
	require.Len(t, all.pos, 4)
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	feed := func() chan error {
		wrote := make(chan error, 1)
		go func() {
			w, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				wrote <- err
				return
			}
			_, err = w.WriteString(content) // less than a pipe's buffer
			wrote <- errors.Join(err, w.Close())
		}()
		return wrote
	}
	wrote := feed()
	rest := runFrom(t, file.Lines(path), all.pos[1])
	require.NoError(t, <-wrote)
	assert.Equal(t, all.items[2:], rest.items)
	assert.Equal(t, all.pos[2:], rest.pos)

	csv := runFrom(t, file.CSV(write(t, "in.csv", content, false), file.CSVOptions{Header: true}), nil)
	require.Len(t, csv.pos, 3)
	src := file.CSV(path, file.CSVOptions{Header: true})
	require.NoError(t, src.Resume(csv.pos[0]))
	err := src.Run(context.Background(), &recorder[file.Record]{}) // opens no pipe: no writer needed
	require.ErrorIs(t, err, file.ErrPosition)
	assert.Contains(t, err.Error(), path)
}

// A CSV source with a header resumed in a named pipe fails Open with
// ErrPosition before it opens the pipe: before, it first read and dropped
// the pipe's bytes up to the position (waiting for a writer that had
// written less), then failed, having taken what the writer wrote.
func TestCSVHeaderResumeInAPipeTakesNothingFromIt(t *testing.T) {
	t.Parallel()
	content := "id,n\n1,a\n2,b\n3,c\n"
	all := runFrom(t, file.CSV(write(t, "in.csv", content, false), file.CSVOptions{Header: true}), nil)
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	// A reader and writer at once: opening it waits for no one.
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteString(content)
	require.NoError(t, err)

	src := file.CSV(path, file.CSVOptions{Header: true})
	require.NoError(t, src.Resume(all.pos[1]))
	err = src.Open(context.Background())
	require.ErrorIs(t, err, file.ErrPosition)
	assert.Contains(t, err.Error(), "resumes only in a regular file")

	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	buf := make([]byte, 64)
	n, err := syscall.Read(fd, buf)
	require.NoError(t, err, "the pipe holds what the writer wrote")
	assert.Equal(t, content, string(buf[:max(n, 0)]))
}
