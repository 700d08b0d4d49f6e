//go:build !race

package main_test

// buildFlags build the program under test as the tests are built.
var buildFlags []string
