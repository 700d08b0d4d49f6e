package pipeline_test

import (
	"os"
	"strconv"
)

// seedsEnv sets how many seeds (or rounds) every property test runs,
// instead of its own default: SLUICE_PROPERTY_SEEDS=200 go test -run
// 'EventTime|Session|Keyed' ./pipeline/ hunts longer than make test does.
const seedsEnv = "SLUICE_PROPERTY_SEEDS"

// seeds returns how many seeds a property test runs: n, which is enough
// to reach every mode and edge it checks in make test, or the number
// $SLUICE_PROPERTY_SEEDS holds.
func seeds(n int) int {
	if v, err := strconv.Atoi(os.Getenv(seedsEnv)); err == nil && v > 0 {
		return v
	}
	return n
}
