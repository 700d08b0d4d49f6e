//go:build unix && !linux

package file

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"runtime"
	"syscall"
)

// openFile opens path for reading. Opening a named pipe waits for a
// writer to open it: ctx ends the wait. (On these systems the open that
// ends the wait is a writer's, by path: a pipe renamed or removed
// meanwhile cannot be woken, and another reader waiting on the pipe is
// woken too. Linux's openFile, in open_linux.go, waits without either.)
func openFile(ctx context.Context, path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		return os.Open(path)
	}
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		done <- opened{f, err}
	}()
	select {
	case o := <-done:
		return o.f, o.err
	case <-ctx.Done():
	}
	// Wake the open: a writer that does not wait for a reader ends it.
	// Until the goroutine is in its open, such a writer finds no reader.
	for {
		w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_ = w.Close()
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			break // the open cannot be woken: leave it to a writer
		}
		select {
		case o := <-done:
			if o.f != nil {
				_ = o.f.Close()
			}
			return nil, ctx.Err()
		default:
			runtime.Gosched()
		}
	}
	go func() {
		if o := <-done; o.f != nil {
			_ = o.f.Close()
		}
	}()
	return nil, ctx.Err()
}
