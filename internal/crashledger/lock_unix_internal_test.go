//go:build unix

package crashledger

import (
	"path/filepath"
	"syscall"
	"testing"
)

// TestUnlockReleasesALockAChildShares: a child process forked while the
// file is open shares its open file, and with it the lock, until it runs
// its program; a duplicated descriptor stands for it here. Closing the
// ledger must release the lock all the same, so that the next
// Open of this process succeeds.
func TestUnlockReleasesALockAChildShares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.ledger")
	f, err := lockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	child, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(child)
	if err := unlockFile(f); err != nil {
		t.Fatal(err)
	}
	g, err := lockFile(path)
	if err != nil {
		t.Fatalf("the lock outlived Close while another descriptor shared it: %v", err)
	}
	if err := unlockFile(g); err != nil {
		t.Fatal(err)
	}
}
