//go:build !unix

package pipeline_test

// signalChildIfAsked: the signal tests, which send POSIX signals, run on
// Unix only.
func signalChildIfAsked() (int, bool) { return 0, false }
