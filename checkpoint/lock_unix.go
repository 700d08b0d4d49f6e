//go:build unix

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile opens path and takes an exclusive flock on it, without
// waiting. The system drops the lock when the process ends, however it
// ends, so a crash never leaves the checkpoint file locked.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, DefaultFileMode)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open the lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("checkpoint: another process uses the checkpoint file (it holds the lock %s); "+
				"give each process a checkpoint file of its own", path)
		}
		return nil, fmt.Errorf("checkpoint: lock %s: %w", path, err)
	}
	return f, nil
}

// unlockFile drops the lock, then closes the file. Closing alone is not
// enough: a child process forked at that moment (os/exec forks, then
// closes the file when it runs its program) shares the open file and its
// lock, which would outlive the Close until the child's exec.
func unlockFile(f *os.File) error {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return f.Close()
}

// syncDir syncs dir, so that a file renamed into it keeps its name after
// a crash of the system.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}
