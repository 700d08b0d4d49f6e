//go:build race

package main

// raceEnabled says the race detector is on: the crash test then uses a
// smaller input, as SQLite runs many times slower under it.
const raceEnabled = true
