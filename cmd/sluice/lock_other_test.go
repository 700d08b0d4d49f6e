//go:build !unix

package main_test

import "testing"

// holdLock skips: without flock(2) a redrive takes no lock.
func holdLock(t *testing.T, _ string) func() {
	t.Skip("no flock(2) here: a redrive takes no lock")
	return nil
}
