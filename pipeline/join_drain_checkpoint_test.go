package pipeline_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
)

// A drain ends a Join's input: the items waiting in its window are let
// go (one that joined nothing ends Filtered), and the final save passes
// them, so under WithCheckpoint a partner that comes after the resume
// finds none, as docs/checkpoints.md says: the pair across the drain is
// not made (a review's finding, documented).
func TestJoinDrainLetsItsWindowGoUnderACheckpoint(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	clock := clockwork.NewFakeClock()
	run := func(left, right []ev) ([]string, pipeline.Result) {
		b := pipeline.New("jd", pipeline.WithClock(clock), pipeline.WithCheckpoint(store, time.Hour))
		var p *pipeline.Pipeline
		var ready sync.WaitGroup
		ready.Add(2)
		drain := func() {
			ready.Done()
			ready.Wait()
			p.Drain()
		}
		l := pipeline.Source(b, "left", &logSource{items: left, open: drain})
		r := pipeline.Source(b, "right", &logSource{items: right, open: drain})
		pairs := pipeline.Join(b, "j", l, r, evKey, evKey, time.Hour, func(a, b ev) string { return strconv.Itoa(a.ID) + "-" + strconv.Itoa(b.ID) })
		var mu sync.Mutex
		var got []string
		pipeline.ForEach(b, "sink", pairs, func(_ context.Context, s string) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, s)
			return nil
		})
		p = build(t, b)
		res, err := p.Run(t.Context())
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		return got, res
	}
	seven := []ev{{ID: 7, Key: 7}}
	got, res := run(seven, nil)
	assert.Empty(t, got)
	assert.Equal(t, int64(1), nodeOf(t, res, "j").Filtered, "the drain let the waiting item go")
	pos, err := store.Load(t.Context(), "jd", "left")
	require.NoError(t, err)
	assert.Equal(t, "1", string(pos), "the final save passed it")
	got, res = run(seven, seven)
	assert.Empty(t, got, "the resumed run does not read left 7 again")
	assert.Equal(t, int64(1), nodeOf(t, res, "j").Filtered, "right 7 found no partner")
}
