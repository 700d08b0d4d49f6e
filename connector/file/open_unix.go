//go:build unix

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
// writer to open it: ctx ends the wait.
func openFile(ctx context.Context, path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		return os.Open(path)
	}
	// The waiting open and the one that wakes it go by a name of the pipe
	// itself where the system has one: by the path, a pipe renamed or
	// removed while the open waits could not be woken, and its goroutine
	// would wait for good.
	name, release := holdPipe(path)
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(name)
		done <- opened{f, namedAs(err, path)}
	}()
	select {
	case o := <-done:
		release()
		return o.f, o.err
	case <-ctx.Done():
	}
	// Wake the open: a writer that does not wait for a reader ends it.
	// Until the goroutine is in its open, such a writer finds no reader.
	for {
		w, err := os.OpenFile(name, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_ = w.Close()
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			break // the open cannot be woken: leave it to a writer
		}
		select {
		case o := <-done:
			release()
			if o.f != nil {
				_ = o.f.Close()
			}
			return nil, ctx.Err()
		default:
			runtime.Gosched()
		}
	}
	// release waits for the open's end: until then, the name must name
	// the pipe.
	go func() {
		o := <-done
		release()
		if o.f != nil {
			_ = o.f.Close()
		}
	}()
	return nil, ctx.Err()
}

// namedAs returns err, an error of an open by another name of path, as
// naming path: a user gave path, not /proc's name of a descriptor.
func namedAs(err error, path string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: path, Err: pe.Err}
	}
	return err
}
