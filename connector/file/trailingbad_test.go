package file_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Bad rows after the file's last good one: a checkpoint saves the
// position of the last item emitted, and a bad row is no item, so each
// clean rerun (no new input) reads them again and dead-letters them
// again, at the same Source and Position. The file dead-letter sink
// recognises them and keeps one letter each; a sink that does not look
// (a memory one here) takes a copy per run. docs/checkpoints.md said a
// clean end saves everything and the next run starts with new input
// only (a review's finding: the docs now say which rows come back).
func TestBadRowsAfterTheLastItemComeBackAfterACleanRun(t *testing.T) {
	path := write(t, "orders.jsonl", "{\"id\":1}\nbad1\nbad2\n", false)
	store := checkpoint.NewMemory()
	mem := deadletter.NewMemory(100)
	dlPath := filepath.Join(t.TempDir(), "dl.jsonl")
	for run := 1; run <= 3; run++ {
		for _, sink := range []string{"memory", "file"} {
			var dl deadletter.Sink = mem
			if sink == "file" {
				f, err := deadletter.OpenFile(dlPath)
				require.NoError(t, err)
				defer f.Close()
				dl = f
			}
			b := pipeline.New("orders-"+sink, pipeline.WithCheckpoint(store, time.Hour), pipeline.WithDeadLetter(dl))
			out := &pipelinetest.Collector[order]{}
			pipeline.Sink(b, "write", pipeline.Source(b, "read", file.JSONL[order](path)), out)
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(t.Context())
			require.NoError(t, err)
			if run == 1 {
				assert.Equal(t, 1, out.Len(), sink)
			} else {
				assert.Equal(t, 0, out.Len(), "%s, run %d: the item is not read again", sink, run)
			}
			if sink == "file" {
				require.NoError(t, dl.(*deadletter.File).Close())
			}
		}
		assert.Equal(t, 2*run, len(mem.Envelopes()), "run %d: the memory sink takes the two bad rows again", run)
	}
	var texts []string
	for env, err := range deadletter.ReadFile(dlPath) {
		require.NoError(t, err)
		texts = append(texts, strings.Trim(string(env.Item.(json.RawMessage)), `"`))
	}
	assert.Equal(t, "bad1,bad2", strings.Join(texts, ","), "the file sink holds each bad row once")
}
