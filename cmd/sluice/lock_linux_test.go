//go:build linux

package main_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitForLock waits until a process holds a lock on the file at path (a
// redrive that made its ledger and locked it), reading /proc/locks again
// and again: trying the lock itself would make the redrive find it held.
// It fails the test after 30 s.
func waitForLock(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		info, err := os.Stat(path)
		if err != nil {
			continue // not made yet
		}
		ino := fmt.Sprintf(":%d ", info.Sys().(*syscall.Stat_t).Ino)
		locks, err := os.ReadFile("/proc/locks")
		require.NoError(t, err)
		for _, l := range strings.Split(string(locks), "\n") {
			if strings.Contains(l, "FLOCK") && strings.Contains(l, ino) {
				return
			}
		}
	}
	t.Fatalf("nobody locked %s", path)
}
