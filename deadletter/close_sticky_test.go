package deadletter_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// Close reports the file's sticky failure: a File that refused writes
// since a rotation failed closed with nil, as if every letter were safe.
func TestCloseReportsTheStickyFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(context.Background(), sampleEnvelope(1)))
	// Someone else's file where the rotation would go: refused, sticky.
	require.NoError(t, os.WriteFile(path+".000001", []byte("{}\n"), 0o600))
	require.Error(t, f.Rotate())
	require.Error(t, f.Write(context.Background(), sampleEnvelope(2)), "the failure is sticky")
	err = f.Close()
	require.Error(t, err)
	assert.ErrorContains(t, err, "exists already")
	assert.NoError(t, f.Close(), "a second Close returns nil")
}

// Closes at once all return, each once the file is closed; one of them
// reports the sticky failure, the others nil.
func TestConcurrentClosesWaitForTheFirst(t *testing.T) {
	for range 20 {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		f, err := deadletter.OpenFile(path, deadletter.WithGroupCommit(1))
		require.NoError(t, err)
		require.NoError(t, f.Write(context.Background(), sampleEnvelope(1)))
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				errs <- f.Close()
				// Closed: a Write after any Close returned is refused.
				assert.ErrorIs(t, f.Write(context.Background(), sampleEnvelope(2)), deadletter.ErrClosed)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
		n := 0
		for _, err := range deadletter.ReadAll(path) {
			require.NoError(t, err)
			n++
		}
		assert.Equal(t, 1, n)
	}
}
