//go:build !linux

package main_test

import "testing"

// waitForLock skips: it reads /proc/locks, which only Linux has.
func waitForLock(t *testing.T, _ string) {
	t.Skip("waitForLock reads /proc/locks, which only Linux has")
}
