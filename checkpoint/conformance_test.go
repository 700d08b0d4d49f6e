package checkpoint_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/checkpoint/checkpointtest"
	"github.com/sluicehq/sluice/internal/require"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	checkpointtest.Run(t, func(*testing.T) checkpoint.Store { return checkpoint.NewMemory() })
}

func TestZeroMemoryConformance(t *testing.T) {
	t.Parallel()
	checkpointtest.Run(t, func(*testing.T) checkpoint.Store { return new(checkpoint.Memory) })
}

func TestFileConformance(t *testing.T) {
	t.Parallel()
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		return openFile(t, filepath.Join(t.TempDir(), "positions.json"))
	}, checkpointtest.WithReopen(func(t *testing.T, s checkpoint.Store) checkpoint.Store {
		f := s.(*checkpoint.File)
		require.NoError(t, f.Close())
		return openFile(t, f.Path())
	}))
}

// openFile opens the checkpoint file at path, and closes it when t ends.
func openFile(t testing.TB, path string) *checkpoint.File {
	t.Helper()
	f, err := checkpoint.OpenFile(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}
