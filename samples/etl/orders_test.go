package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write of the orders file killed before its rename leaves a temporary
// file beside it; the next write removes it, and leaves alone the files
// whose names only look alike.
func TestWriteOrdersRemovesStaleTemporaryFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "orders-100-seed1.csv")
	stale := []string{path + ".123456.tmp", path + ".9.tmp"}
	kept := []string{path + ".abc.tmp", path + "..tmp", filepath.Join(dir, "other.csv.123.tmp"), path + ".123.tmp.bak"}
	for _, name := range append(append([]string{}, stale...), kept...) {
		require.NoError(t, os.WriteFile(name, []byte("half a data set"), 0o600))
	}
	wrote, err := writeOrders(path, 100, 1)
	require.NoError(t, err)
	assert.True(t, wrote)
	for _, name := range stale {
		assert.NoFileExists(t, name)
	}
	for _, name := range kept {
		assert.FileExists(t, name)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1+len(kept), "the orders file and the look-alikes, no temporary file of this write")
}
