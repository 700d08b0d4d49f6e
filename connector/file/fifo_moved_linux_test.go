//go:build linux

package file_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"go.uber.org/goleak"
)

// Opening a named pipe that is renamed or removed while Open waits for a
// writer ends with the context and leaves no goroutine behind: before,
// the open that woke the waiting one went by the path, which no longer
// named the pipe, and the waiting open stayed blocked for good (one more
// goroutine each time a node retry opened the source again). Not
// parallel: goleak sees every goroutine of the process.
func TestOpenOfANamedPipeMovedWhileWaitingEndsWithTheContext(t *testing.T) {
	for _, move := range []struct {
		name string
		do   func(path string) error
	}{
		{"renamed", func(path string) error { return os.Rename(path, path+".old") }},
		{"removed", os.Remove},
		{"replaced by a file", func(path string) error {
			if err := os.Remove(path); err != nil {
				return err
			}
			return os.WriteFile(path, []byte("x\n"), 0o600)
		}},
	} {
		t.Run(move.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			path := filepath.Join(t.TempDir(), "fifo")
			require.NoError(t, syscall.Mkfifo(path, 0o600))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src := file.Lines(path)
			opened := make(chan error, 1)
			go func() { opened <- src.Open(ctx) }()
			waitForBlockedOpen(t)
			require.NoError(t, move.do(path))
			cancel()
			assert.ErrorIs(t, <-opened, context.Canceled)
		})
	}
}

// waitForBlockedOpen waits until a goroutine of the package is in an
// open(2) that waits for a pipe's writer.
func waitForBlockedOpen(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var b strings.Builder
		require.NoError(t, pprof.Lookup("goroutine").WriteTo(&b, 2))
		for _, g := range strings.Split(b.String(), "\n\n") {
			if strings.Contains(g, "[syscall") && strings.Contains(g, "connector/file.openFile") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no open of the pipe waits for a writer")
		}
		runtime.Gosched()
	}
}
