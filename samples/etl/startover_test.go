package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// Without a checkpoint every run starts over: it clears the tables and
// loads every valid row again.
func TestWithoutCheckpointEveryRunClearsTheTables(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 1000
	cfg.checkpointEvery = 0
	first := runOnFakeClock(t, cfg)
	require.Positive(t, first.inTable)
	again := runOnFakeClock(t, cfg)
	assert.Contains(t, again.at.String(), "starting at the first row of 1000 (no checkpoint: -checkpoint-every 0)")
	assert.Equal(t, again.node("validate").Out, again.inTable)
	assert.Equal(t, again.inTable, again.changed, "the cleared table gets every row again")
}
