package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run killed before the first save of its checkpoint leaves the input's
// path and content beside no position: the next run starts at the first
// row again, says "no checkpoint yet", and goes on with the tables and
// dead letters of the killed one. Once the input's modification time
// changes, the next run starts over instead.
func TestKilledBeforeFirstSaveStartsAtFirstRowAgain(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 100
	cfg.defaults()
	_, err := writeOrders(cfg.input, cfg.rows, cfg.seed)
	require.NoError(t, err)

	for i, wantOver := range []bool{true, false, false} {
		c, at, err := openCheckpoint(t.Context(), cfg)
		require.NoError(t, err)
		require.NoError(t, c.close()) // killed before its first save
		assert.Equal(t, "starting at the first row of 100 (no checkpoint yet)", at.String(), "run %d", i)
		assert.Equal(t, wantOver, at.over, "run %d: only the first run starts over", i)
	}

	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(cfg.input, later, later))
	c, at, err := openCheckpoint(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, c.close())
	assert.Contains(t, at.String(), "starting at the first row of 100 ("+cfg.input+" changed since the checkpoint was saved)")
	assert.True(t, at.over)
}
