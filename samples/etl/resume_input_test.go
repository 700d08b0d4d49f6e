package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
)

// An -input file edited in place between runs (a row before the saved
// position deleted, as a user fixing the file would) must not make the
// resumed run skip a row of the file it reads: every row of the file is
// loaded or dead-lettered, or the run fails saying the checkpoint does not
// fit the file.
func TestResumeAfterInputEditedInPlaceLosesNoRow(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 3000 // the drained first run reads a few hundred; the second the rest
	cfg.input = filepath.Join(filepath.Dir(cfg.db), "in.csv")
	_, err := writeOrders(cfg.input, cfg.rows, cfg.seed)
	require.NoError(t, err)

	// The first run is drained part way: the checkpoint holds the
	// position after the last row it read.
	drain := make(chan struct{})
	first := runOnFakeClockWith(t, cfg, &lockedBuffer{}, func() { close(drain) }, drain)
	n := int(first.read())
	require.Positive(t, n)
	require.Less(t, n, cfg.rows)

	// Delete a row before the position, one as long as the row right
	// after it: the saved offset is at a line's end of the edited file.
	raw, err := os.ReadFile(cfg.input)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(raw), "\n") // lines[0] is the header
	next := lines[n+1]
	del := -1
	for i := 1; i <= n; i++ {
		if len(lines[i]) == len(next) {
			del = i
			break
		}
	}
	require.Positive(t, del, "a row before the position as long as the one after it")
	edited := append(append([]string{}, lines[:del]...), lines[del+1:]...)
	require.NoError(t, os.WriteFile(cfg.input, []byte(strings.Join(edited, "")), 0o600))

	// The resumed run either refuses the checkpoint or reads on from the
	// row after the last one the first run read: the row that was next
	// is loaded or dead-lettered.
	second, err := runOnFakeClockErr(t, cfg)
	if err != nil {
		assert.ErrorContains(t, err, "does not fit")
		return
	}
	id := strings.SplitN(next, ",", 2)[0]
	db, err := sql.Open("sqlite", "file:"+cfg.db+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var loaded int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM orders WHERE id = ?`, id).Scan(&loaded))
	lettered := 0
	for env, err := range deadletter.ReadAll(cfg.dlq) {
		require.NoError(t, err)
		if strings.Contains(fmt.Sprintf("%s", env.Item), id+`"`) {
			lettered++
		}
	}
	assert.Equal(t, 1, loaded+lettered, "row %s (%q), the one after the position, is loaded or dead-lettered once; the resumed run: %s",
		id, strings.TrimSpace(next), second.at)
}

// runOnFakeClockErr is runOnFakeClock returning the run's error instead
// of failing the test on it.
func runOnFakeClockErr(t *testing.T, cfg config) (summary, error) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		s   summary
		err error
	}
	done := make(chan result, 1)
	// The job waits on the clock when something besides the clock's
	// standing tickers (the checkpoint's, the progress display's) does.
	waiters := 1
	if cfg.checkpointEvery > 0 {
		waiters++
	}
	if cfg.progress > 0 {
		waiters++
	}
	go func() {
		s, err := runETL(ctx, cfg, clock, &bytes.Buffer{}, nil)
		done <- result{s, err}
	}()
	for {
		select {
		case r := <-done:
			return r.s, r.err
		default:
		}
		wctx, wcancel := context.WithCancel(ctx)
		go func() {
			select {
			case r := <-done:
				done <- r
				wcancel()
			case <-wctx.Done():
			}
		}()
		if clock.BlockUntilContext(wctx, waiters) == nil {
			clock.Advance(time.Millisecond)
		}
		wcancel()
	}
}
