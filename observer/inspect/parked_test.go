package inspect_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// retried tells when a retry is announced.
type retried struct {
	observer.Nop
	ch chan struct{}
}

func (r retried) OnRetry(observer.RetryEvent) { r.ch <- struct{}{} }

// A retry an item waits for on a Parallel node shows as parked until it is
// made.
func TestParkedRetries(t *testing.T) {
	clock := clockwork.NewFakeClock()
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	sig := retried{ch: make(chan struct{}, 1)}
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(observer.Multi(in, sig)))
	var calls atomic.Int32
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	checked := pipeline.Map(b, "check", src, func(_ context.Context, x int) (int, error) {
		if x == 2 && calls.Add(1) == 1 {
			return 0, resilience.MarkTransient(errors.New("busy"))
		}
		return x, nil
	}, pipeline.Parallel(2), pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
	}))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	srv := newServer(t, in)

	run := pipelinetest.Start(context.Background(), p)
	<-sig.ch
	var sn struct {
		Running bool
		Nodes   []struct {
			Name        string
			Parked      int64
			ItemRetries int64
		}
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/snapshot", &sn))
	require.True(t, sn.Running)
	assert.Equal(t, "check", sn.Nodes[1].Name)
	assert.Equal(t, int64(1), sn.Nodes[1].Parked, "the retry waits parked")
	assert.Equal(t, int64(0), sn.Nodes[1].ItemRetries, "and is not made yet")

	_, err = pipelinetest.AdvanceUntilDone(context.Background(), clock, run, time.Second)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/snapshot", &sn))
	assert.False(t, sn.Running)
	assert.Equal(t, int64(0), sn.Nodes[1].Parked)
	assert.Equal(t, int64(1), sn.Nodes[1].ItemRetries)
}

// A plain node's retry waiting in place for its backoff shows as waiting
// (docs/inspector.md), and no longer once it is made. The engine counts a
// retry once its call is made on every node shape; the Inspector's
// comment and docs said a plain node's retry never waited (a review's
// finding).
func TestWaitingRetryInPlace(t *testing.T) {
	clock := clockwork.NewFakeClock()
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(observer.Multi(in, rec)))
	g := make(gateInts)
	calls := make(chan struct{}, 4)
	src := pipeline.Source(b, "read", g)
	checked := pipeline.Map(b, "check", src, func(_ context.Context, x int) (int, error) {
		calls <- struct{}{}
		return 0, resilience.MarkTransient(errors.New("busy"))
	}, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
	}))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	url := newServer(t, in).URL + "/api/snapshot"
	run := pipelinetest.Start(context.Background(), p)
	ctx := context.Background()
	g <- 1
	_, err = pipelinetest.WaitFor[observer.RetryEvent](ctx, rec, 1)
	require.NoError(t, err)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	var sn struct {
		Nodes []struct {
			Name        string
			Parked      int64
			ItemRetries int64
		}
	}
	require.Equal(t, http.StatusOK, getJSON(t, url, &sn))
	require.Equal(t, "check", sn.Nodes[1].Name)
	assert.Equal(t, int64(1), sn.Nodes[1].Parked, "waiting in place")
	assert.Equal(t, int64(0), sn.Nodes[1].ItemRetries, "not made yet")
	clock.Advance(time.Second)
	_, err = pipelinetest.WaitFor[observer.DropEvent](ctx, rec, 1)
	require.NoError(t, err)
	assert.Len(t, calls, 2)
	require.Equal(t, http.StatusOK, getJSON(t, url, &sn))
	assert.Equal(t, int64(0), sn.Nodes[1].Parked, "made")
	assert.Equal(t, int64(1), sn.Nodes[1].ItemRetries)
	close(g)
	_, err = run.Wait()
	require.NoError(t, err)
}
