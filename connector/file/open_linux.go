//go:build linux

package file

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// openFile opens path for reading. A named pipe is opened at once, without
// waiting for a writer (O_NONBLOCK), and Open then waits in the runtime's
// poller until a writer has written to it, or opened and closed it: ctx
// ends the wait. Nothing is left blocked in open(2), and nothing is opened
// for writing to end a wait, which would wake every reader of the pipe,
// another source's too (it would read an empty input), and could not find
// a pipe renamed or removed meanwhile.
//
// Every path is opened so, and what it is decided on the descriptor: a
// path that became a pipe after a look at it would otherwise be opened by
// a plain open(2), which waits for a writer whatever ctx says.
func openFile(ctx context.Context, path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		_ = syscall.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	// Non-blocking, it is read through the runtime's poller where it can
	// be (a pipe, a terminal), so that a read's deadline (input.watch)
	// ends a wait.
	f := os.NewFile(uintptr(fd), path)
	if st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		if errors.Is(f.SetReadDeadline(time.Time{}), os.ErrNoDeadline) {
			// Not in the poller (a regular file): blocking, as os.Open
			// leaves such a file.
			if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
				_ = f.Close()
				return nil, &fs.PathError{Op: "open", Path: path, Err: err}
			}
		}
		return f, nil
	}
	if err := waitForWriter(ctx, f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// waitForWriter waits until f, a named pipe opened without waiting, has
// something to read or its writer came and went (a read then ends at
// once), or until ctx ends. Until a writer opens it, a read of such a
// pipe returns no bytes, as at its end: Open must not return before.
func waitForWriter(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		var ready bool
		ready, perr = readable(fd)
		return ready || perr != nil
	})
	if !stop() {
		return ctx.Err() // its deadline is set, or about to be
	}
	if perr != nil {
		return &fs.PathError{Op: "poll", Path: f.Name(), Err: perr}
	}
	return err
}

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollIn = 0x1

// readable reports, without waiting, whether a read of fd would not wait:
// data is there, or a writer came and went (POLLHUP), or an error is. A
// pipe's reader sees no POLLHUP before a writer has opened the pipe.
func readable(fd uintptr) (bool, error) {
	p := pollFd{fd: int32(fd), events: pollIn}
	var now syscall.Timespec // zero: do not wait
	for {
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, uintptr(unsafe.Pointer(&now)), 0, 0, 0)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return false, errno
		}
		return n > 0 && p.revents != 0, nil
	}
}
