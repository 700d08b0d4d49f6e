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
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// openSource emits its items with EmitAt (position i+1), resuming after a
// position, then calls after and waits for its context: an input that
// goes on.
type openSource struct {
	items []int
	from  int
	after func()
}

func (s *openSource) Resume(pos []byte) error {
	s.from = 0
	if pos != nil {
		n, err := strconv.Atoi(string(pos))
		if err != nil {
			return err
		}
		s.from = n
	}
	return nil
}

func (s *openSource) Run(ctx context.Context, emit node.Emitter[int]) error {
	for i := s.from; i < len(s.items); i++ {
		if err := emit.EmitAt(ctx, s.items[i], []byte(strconv.Itoa(i+1))); err != nil {
			return err
		}
	}
	if s.after != nil {
		s.after()
	}
	<-ctx.Done()
	return nil
}

// A drain ends a Join's input: the items waiting in its window are let
// go (one that joined nothing ends Filtered), and the final save passes
// them, so under WithCheckpoint a partner that comes after the resume
// finds none, as docs/checkpoints.md says: the pair across the drain is
// not made (a review's finding, documented).
func TestJoinDrainLetsItsWindowGoUnderACheckpoint(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	clock := clockwork.NewFakeClock()
	run := func(left, right []int) ([]string, pipeline.Result) {
		b := pipeline.New("jd", pipeline.WithClock(clock), pipeline.WithCheckpoint(store, time.Hour))
		var p *pipeline.Pipeline
		var ready sync.WaitGroup
		ready.Add(2)
		drain := func() {
			ready.Done()
			ready.Wait()
			p.Drain()
		}
		l := pipeline.Source[int](b, "left", &openSource{items: left, after: drain})
		r := pipeline.Source[int](b, "right", &openSource{items: right, after: drain})
		id := func(v int) int { return v }
		pairs := pipeline.Join(b, "j", l, r, id, id, time.Hour, func(a, b int) string { return strconv.Itoa(a) + "-" + strconv.Itoa(b) })
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
	got, res := run([]int{7}, nil)
	assert.Empty(t, got)
	assert.Equal(t, int64(1), nodeOf(t, res, "j").Filtered, "the drain let the waiting item go")
	pos, err := store.Load(t.Context(), "jd", "left")
	require.NoError(t, err)
	assert.Equal(t, "1", string(pos), "the final save passed it")
	got, res = run([]int{7}, []int{7})
	assert.Empty(t, got, "the resumed run does not read left 7 again")
	assert.Equal(t, int64(1), nodeOf(t, res, "j").Filtered, "right 7 found no partner")
}
