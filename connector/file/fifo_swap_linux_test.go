//go:build linux

package file_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/require"
)

// A path that is a regular file when Open looks at it and a named pipe
// when it opens it: the context still ends the Open. Before, a look
// (Stat) chose a plain open(2) for the regular file, which then waited
// for the pipe's writer whatever the context said. (Found by a review:
// at iteration 453.)
func TestOpenOfAPathThatBecomesANamedPipeEndsWithTheContext(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in")
	reg := filepath.Join(dir, "reg")
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, os.WriteFile(reg, []byte("a\n"), 0o600))
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	// path is a hard link to reg or to fifo, swapped atomically by rename.
	regLink := filepath.Join(dir, "regl")
	fifoLink := filepath.Join(dir, "fifol")
	var stop atomic.Bool
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for !stop.Load() {
			_ = os.Link(reg, regLink)
			_ = os.Rename(regLink, path)
			_ = os.Link(fifo, fifoLink)
			_ = os.Rename(fifoLink, path)
		}
	}()
	defer func() { stop.Store(true); <-swapped }()
	for i := range 3000 {
		ctx, cancel := context.WithCancel(context.Background())
		src := file.Lines(path)
		done := make(chan error, 1)
		go func() { done <- src.Open(ctx) }()
		cancel()
		deadline := time.Now().Add(2 * time.Second)
		var err error
		returned := false
		for time.Now().Before(deadline) {
			select {
			case err = <-done:
				returned = true
			default:
				runtime.Gosched()
				continue
			}
			break
		}
		if !returned {
			// unblock it: a writer opens the pipe
			w, werr := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if werr == nil {
				w.Close()
			}
			<-done
			_ = src.Close(context.Background())
			t.Fatalf("iteration %d: Open did not end with its cancelled context (blocked in open(2) of a pipe)", i)
		}
		if err == nil {
			_ = src.Close(context.Background())
		}
	}
}
