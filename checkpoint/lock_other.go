//go:build !unix

package checkpoint

import (
	"fmt"
	"os"
)

// lockFile opens path. Without flock there is no lock: two processes given
// the same checkpoint file are not stopped.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, DefaultFileMode)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open the lock %s: %w", path, err)
	}
	return f, nil
}

func unlockFile(f *os.File) error { return f.Close() }

// syncDir does nothing: directories cannot be opened for syncing on every
// system (Windows).
func syncDir(string) error { return nil }
