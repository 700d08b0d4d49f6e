//go:build race

package sql_test

// raceEnabled says the tests run under the race detector, which makes
// reading rows some thirty times slower: the volume tests read fewer.
const raceEnabled = true
