package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// slowOnce is a transform whose first call of each item waits: for its
// context to end, or, when ignore is set, for release, whatever its context
// says. Later calls succeed at once.
type slowOnce struct {
	ignore  bool
	release chan struct{}
	entered chan struct{}

	mu       sync.Mutex
	calls    int
	deadline time.Time
}

func (s *slowOnce) Process(ctx context.Context, x int) (int, error) {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	if first {
		s.deadline, _ = ctx.Deadline()
	}
	s.mu.Unlock()
	if !first {
		return x, nil
	}
	close(s.entered)
	if s.ignore {
		<-s.release
		return 0, errors.New("late")
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

func (s *slowOnce) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func timeoutPipeline(t *testing.T, clock *clockwork.FakeClock, tr node.Transform[int, int], rec *pipelinetest.Recorder, par int) *pipeline.Pipeline {
	b := pipeline.New("timeout", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.ItemRetry.AttemptTimeout = 5 * time.Second
		}))
	out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(7)), tr, pipeline.Parallel(par))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	return build(t, b)
}

// A call that runs past AttemptTimeout has its context ended at the
// deadline on the pipeline's clock, not a moment before, fails with
// ErrAttemptTimeout, and is retried.
func TestAttemptTimeoutEndsASlowCall(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 2} {
		for range 10 {
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			rec := &pipelinetest.Recorder{}
			tr := &slowOnce{entered: make(chan struct{})}
			run := pipelinetest.Start(t.Context(), timeoutPipeline(t, clock, tr, rec, par))
			<-tr.entered
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
			assert.Equal(t, start.Add(5*time.Second), tr.deadline)
			clock.Advance(5*time.Second - time.Nanosecond)
			assert.False(t, run.Finished())
			assert.Equal(t, 1, tr.count(), "no retry before the deadline")
			clock.Advance(time.Nanosecond)
			res, err := run.Wait()
			require.NoError(t, err)
			assert.Equal(t, int64(1), nodeOf(t, res, "sink").In)
			assert.Equal(t, 2, tr.count())
			retries := pipelinetest.Of[observer.RetryEvent](rec)
			require.Len(t, retries, 1)
			assert.ErrorIs(t, retries[0].Err, resilience.ErrAttemptTimeout)
			var te *resilience.AttemptTimeoutError
			require.ErrorAs(t, retries[0].Err, &te)
			assert.Equal(t, 5*time.Second, te.Timeout)
			assert.ErrorIs(t, retries[0].Err, context.DeadlineExceeded, "the call's own error is kept")
		}
	}
}

// A call that ignores its context keeps its worker past the deadline: the
// item is not retried until the call returns; its error, after the
// deadline, is then an attempt timeout.
func TestAttemptTimeoutCannotStopACallThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	tr := &slowOnce{ignore: true, release: make(chan struct{}), entered: make(chan struct{})}
	run := pipelinetest.Start(t.Context(), timeoutPipeline(t, clock, tr, rec, 1))
	<-tr.entered
	// The call never looks at its context: no timer waits on the clock.
	clock.Advance(time.Minute)
	assert.False(t, run.Finished())
	assert.Equal(t, 1, tr.count(), "the worker is still in the first call")
	close(tr.release)
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, 2, tr.count())
	retries := pipelinetest.Of[observer.RetryEvent](rec)
	require.Len(t, retries, 1)
	assert.ErrorIs(t, retries[0].Err, resilience.ErrAttemptTimeout)
	assert.ErrorContains(t, retries[0].Err, "late")
}

// AttemptTimeout must not be negative.
func TestAttemptTimeoutValidation(t *testing.T) {
	t.Parallel()
	o := resilience.ForProfile(resilience.ProfileDefault)
	o.ItemRetry.AttemptTimeout = -time.Second
	assert.ErrorContains(t, o.Validate(), "ItemRetry.AttemptTimeout")
}

// On a fake clock that never moves, a call that fails at once, or looks at
// ctx.Err(), does not wait for its deadline and is no attempt timeout.
func TestAttemptTimeoutOnAFakeClockDoesNotWait(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var seen []error
	var mu sync.Mutex
	tr := node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
		if err := ctx.Err(); err != nil { // would block on clockwork's fake context
			return 0, err
		}
		if x == 3 {
			return 0, resilience.MarkPermanent(errors.New("bad input"))
		}
		return x, nil
	})
	b := pipeline.New("timeout", pipeline.WithClock(clock), pipeline.WithObserver(observer.Nop{}),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.AttemptTimeout = 5 * time.Second
			o.OnItemFailure = resilience.Skip
			o.FailureRules = []resilience.FailureRule{{Match: func(err error) bool {
				mu.Lock()
				seen = append(seen, err)
				mu.Unlock()
				return false
			}, Action: resilience.Skip}}
		}))
	out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(5)...)), tr)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	res, err := build(t, b).Run(t.Context()) // the clock never moves
	require.NoError(t, err)
	assert.Equal(t, int64(1), nodeOf(t, res, "call").Skipped)
	require.Len(t, seen, 1)
	assert.NotErrorIs(t, seen[0], resilience.ErrAttemptTimeout)
}
