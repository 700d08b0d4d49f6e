package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A run that starts over on another input (another -seed here; -rows or
// -input alike, with or without -fresh) says it starts at the first row:
// it ends with the tables a run of that input alone leaves, not with the
// orders of the earlier input, some of which this input's rows reject.
func TestStartingOverOnAnotherInputLeavesOnlyItsOrders(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 1000
	runOnFakeClock(t, cfg)

	cfg.seed++
	cfg.input = ""
	cfg.fresh = true
	again := runOnFakeClock(t, cfg)
	assert.Contains(t, again.at.String(), "starting at the first row")
	assert.Equal(t, again.node("validate").Out, again.inTable,
		"the orders table holds the orders this input loaded, as a run of it alone would")
}
