//go:build unix

package deadletter_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// Only what rotation names, six digits at least with no other zeros in
// front, and only regular files: a sibling PATH.2024 (another sink's
// file, a backup) was read as a rotation, and a named pipe so named
// blocked every --rotated read and OpenFile (a review's finding).
func TestRotatedTakesOnlyRotationsNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "dl.jsonl")
	for _, name := range []string{"dl.jsonl.000001", "dl.jsonl.2024", "dl.jsonl.1", "dl.jsonl.0000003", "dl.jsonl.99999"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "dl.jsonl.000004"), 0o700))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "dl.jsonl.000005"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(dir, "dl.jsonl.000001"), filepath.Join(dir, "dl.jsonl.000006")))
	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	assert.Equal(t, []string{path + ".000001", path + ".000006"}, rotated)
	// A relative path whose directory is not clean keeps its spelling.
	rotated, err = deadletter.Rotated(dir + "/./dl.jsonl")
	require.NoError(t, err)
	assert.Len(t, rotated, 2)
}
