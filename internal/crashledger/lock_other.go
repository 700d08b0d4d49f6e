//go:build !unix

package crashledger

import (
	"fmt"
	"os"
)

// lockFile opens path. Without flock, the lock is only advisory here: two
// processes given the same path are not stopped.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("crashledger: open %s: %w", path, err)
	}
	return f, nil
}

func unlockFile(f *os.File) error { return f.Close() }
