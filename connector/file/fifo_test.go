//go:build unix

package file_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// The package reads "a file": one that is not regular (a named pipe, as a
// shell's process substitution or /dev/stdin gives) is read as a stream
// (Size unknown), not failed by the count at Open.
func TestLinesReadsANamedPipe(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			wrote <- err
			return
		}
		_, err = w.WriteString("a\nb\n")
		wrote <- errors.Join(err, w.Close())
	}()
	r := &recorder[string]{}
	err := file.Lines(path).Run(context.Background(), r)
	<-wrote
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, r.items)
}
