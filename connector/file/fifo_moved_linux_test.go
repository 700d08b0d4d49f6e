//go:build linux

package file_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"go.uber.org/goleak"
)

// Opening a named pipe that is renamed or removed while Open waits for a
// writer ends with the context and leaves no goroutine behind: before,
// the open that woke the waiting one went by the path, which no longer
// named the pipe, and the waiting open stayed blocked for good (one more
// goroutine each time a node retry opened the source again). Not
// parallel: goleak sees every goroutine of the process, and
// waitForAnOpenPipe every descriptor.
func TestOpenOfANamedPipeMovedWhileWaitingEndsWithTheContext(t *testing.T) {
	for _, move := range []struct {
		name string
		do   func(path string) error
	}{
		{"renamed", func(path string) error { return os.Rename(path, path+".old") }},
		{"removed", os.Remove},
		{"replaced by a file", func(path string) error {
			if err := os.Remove(path); err != nil {
				return err
			}
			return os.WriteFile(path, []byte("x\n"), 0o600)
		}},
	} {
		t.Run(move.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			path := filepath.Join(t.TempDir(), "fifo")
			require.NoError(t, syscall.Mkfifo(path, 0o600))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src := file.Lines(path)
			opened := make(chan error, 1)
			go func() { opened <- src.Open(ctx) }()
			waitForAnOpenPipe(t, path, 1)
			require.NoError(t, move.do(path))
			cancel()
			assert.ErrorIs(t, <-opened, context.Canceled)
		})
	}
}

// An Open of a named pipe whose context ended wakes no other reader of
// the pipe: before, it ended its own wait by opening the pipe for
// writing, which woke every reader waiting on it, so that another source
// reading the pipe (another pipeline, or the Open of a node retry beside
// the one it replaces) read an empty input and ended, its rows lost; and
// the cancelled Open's own goroutine, not yet in its open, then waited
// for good. (Found by a review.)
func TestACancelledOpenOfANamedPipeWakesNoOtherReader(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	type result struct {
		items []string
		err   error
	}
	ran := make(chan result, 1)
	b := file.Lines(path)
	go func() {
		r := &recorder[string]{}
		err := b.Run(ctxB, r)
		ran <- result{r.items, err}
	}()
	waitForAnOpenPipe(t, path, 1)

	ctxA, cancelA := context.WithCancel(context.Background())
	cancelA()
	assert.ErrorIs(t, file.Lines(path).Open(ctxA), context.Canceled)
	// B, woken, would end at once: give it the time a wake takes.
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); runtime.Gosched() {
		select {
		case res := <-ran:
			t.Fatalf("the cancelled Open woke the other reader, which read %q, err %v", res.items, res.err)
		default:
		}
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = w.WriteString("a\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	res := <-ran
	require.NoError(t, res.err)
	assert.Equal(t, []string{"a"}, res.items)
}

// A writer that opens a named pipe and closes it without writing gives an
// empty input: Open ends, and the Run reads nothing and ends.
func TestANamedPipeWhoseWriterWritesNothingIsEmpty(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	closed := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0) // waits for the reader
		if err == nil {
			err = w.Close()
		}
		closed <- err
	}()
	r := &recorder[string]{}
	require.NoError(t, file.Lines(path).Run(context.Background(), r))
	require.NoError(t, <-closed)
	assert.Empty(t, r.items)
}

// waitForAnOpenPipe waits until n descriptors of the process name the
// pipe at path: a source has it open and waits for its writer.
func waitForAnOpenPipe(t *testing.T, path string, n int) {
	t.Helper()
	var want syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &want))
	deadline := time.Now().Add(10 * time.Second)
	for {
		fds, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		found := 0
		for _, fd := range fds {
			var st syscall.Stat_t
			if syscall.Stat("/proc/self/fd/"+fd.Name(), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
				found++
			}
		}
		if found >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors of the pipe, want %d", found, n)
		}
		runtime.Gosched()
	}
}
