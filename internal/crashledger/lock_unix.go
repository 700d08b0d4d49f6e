//go:build unix

package crashledger

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile opens path and takes an exclusive flock on it, without
// waiting. The kernel drops the lock when the process dies, however it
// dies, so a crash never leaves the ledger locked.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("crashledger: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked; give each consumer process a ledger path of its own", ErrLocked, path)
		}
		return nil, fmt.Errorf("crashledger: lock %s: %w", path, err)
	}
	return f, nil
}

func unlockFile(f *os.File) error {
	// Unlock before closing: a child process forked at that moment (os/exec
	// forks, then closes the file when it runs its program) shares the
	// open file and its lock, which would outlive the Close until the
	// child's exec.
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return f.Close()
}
