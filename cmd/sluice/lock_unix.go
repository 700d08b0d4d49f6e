//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// errLocked is lockFile's error for a file another process holds.
var errLocked = errors.New("another process holds it")

// lockFile takes an exclusive lock on f, without waiting: errLocked when
// another process holds one. The lock ends when f is closed.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
