//go:build unix

package connectors_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process used so
// far, and true; false where it cannot be read.
func processCPU() (time.Duration, bool) {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0, false
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano()), true
}
