//go:build !race

package sql_test

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
