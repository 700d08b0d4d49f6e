//go:build unix

package main_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// holdLock creates path and holds the lock a redrive takes on its ledger,
// as another redrive would, until release (or the test's end).
func holdLock(t *testing.T, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	t.Cleanup(func() { f.Close() })
	return func() { require.NoError(t, f.Close()) }
}
