//go:build race

package main_test

// buildFlags build the program under test with the race detector when the
// tests run with it, so that -race covers the program's own code too.
var buildFlags = []string{"-race"}
