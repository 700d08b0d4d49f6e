package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// The ErrLate bypass in nodeRun.action is not confined to an event-time
// Aggregate: any node whose call fails with an error that wraps ErrLate
// (a Map that rejects stale events with the exported sentinel, as the
// docs invite) ignores OnItemFailure and dead-letters the item. Here
// OnItemFailure is Skip: the item should be Skipped, with no dead letter.
func TestReviewOnItemFailureBypassedForErrLateOutsideAggregate(t *testing.T) {
	t.Parallel()
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("bypass", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
	}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3))
	fresh := pipeline.Map(b, "fresh", src, func(_ context.Context, v int) (int, error) {
		if v == 2 {
			return 0, fmt.Errorf("event %d is stale: %w", v, pipeline.ErrLate)
		}
		return v, nil
	})
	col := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "store", fresh, col)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	st := nodeOf(t, res, "fresh")
	assert.Equal(t, int64(1), st.Skipped, "OnItemFailure Skip skips the failed item")
	assert.Equal(t, int64(0), st.DeadLettered, "a Map has no late items: OnItemFailure is its action")
}

// Same bypass, without a dead-letter sink: Build accepts the pipeline
// (only an event-time Aggregate is checked for a sink), OnItemFailure is
// Skip, yet the item is sent to the missing dead-letter sink.
func TestReviewErrLateInMapWithoutDeadLetterSink(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bypass", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
	}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3))
	fresh := pipeline.Map(b, "fresh", src, func(_ context.Context, v int) (int, error) {
		if v == 2 {
			return 0, fmt.Errorf("event %d is stale: %w", v, pipeline.ErrLate)
		}
		return v, nil
	})
	col := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "store", fresh, col)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err, "OnItemFailure Skip: the run goes on")
	assert.Equal(t, int64(1), nodeOf(t, res, "fresh").Skipped)
	assert.Equal(t, 2, len(col.Items()))
}

// Build checks that late items have somewhere to go by matching the
// failure rules against a zero LateError. A rule that skips items late by
// at most an hour matches the zero sample (late by 0), so Build accepts a
// pipeline with no dead-letter sink; an item late by three hours then
// matches no rule, is sent to DeadLetter, and the run fails on a nil
// sink (a nil pointer panic) instead of Build naming the missing sink.
func TestReviewLateRuleCheckedWithZeroSample(t *testing.T) {
	t.Parallel()
	withinHour := func(err error) bool {
		var le *pipeline.LateError
		return errors.As(err, &le) && le.Watermark.Sub(le.EventTime) <= time.Hour
	}
	b := pipeline.New("et", pipeline.WithResilience(func(o *resilience.Options) {
		o.FailureRules = []resilience.FailureRule{{Match: withinHour, Action: resilience.Skip}}
	}))
	items := []ev{{At: epoch.Add(3 * time.Hour)}, {ID: 1, At: epoch}}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewSliceSource(items...)), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, 0))
	pipeline.Sink(b, "store", wins, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	p, err := b.Build()
	if err != nil {
		return // Build named the missing sink: what this test asks for
	}
	_, err = p.Run(t.Context())
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "nil pointer", "a late item with no rule and no sink fails with a clear error, not a panic")
	assert.Contains(t, err.Error(), "WithDeadLetter", "the error names the missing dead-letter sink")
}

// docs/nodes.md sells EventTime against "a consumer catching up after an
// outage" landing in the wrong hour, and its example takes an idle timeout
// (EventTime(at, 5m, 1m), AllowedLateness(1h)). But an outage upstream is
// a quiet input: after idle the watermark runs on with the pipeline's
// clock, so the backlog the consumer catches up with, in order and well
// within maxLateness of the items before it, is all late. Here the hour
// [10:00, 11:00) gets 11 of its 60 items; the other 49 are late.
func TestReviewIdleWatermarkMakesCatchUpAfterOutageLate(t *testing.T) {
	t.Parallel()
	ten := epoch.Add(10 * time.Hour)
	clock := clockwork.NewFakeClockAt(ten)
	f := &evFeed{items: make(chan ev)}
	b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1))
	var late pipeline.Stream[ev]
	wins := pipeline.Aggregate(b, "hourly", pipeline.Source(b, "src", f), evKey, pipeline.TimeWindow(time.Hour), evZero, evSum,
		pipeline.EventTime(evAt, 5*time.Minute, time.Minute), pipeline.AllowedLateness(time.Hour), pipeline.Late(&late))
	log := &windowLog{}
	pipeline.ForEach(b, "store", wins, log.write)
	lateCol := &pipelinetest.Collector[ev]{}
	pipeline.Sink(b, "late", late, lateCol)
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	for i := range 11 { // 10:00 .. 10:10, as they happen
		f.items <- ev{ID: i, V: 1, At: ten.Add(time.Duration(i) * time.Minute)}
	}
	taken(p, "hourly", 11)
	// The broker is down for three hours: nothing comes.
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(3 * time.Hour)
	log.wait(1)
	// The consumer catches up: 10:11 .. 10:59, in order.
	for i := 11; i < 60; i++ {
		f.items <- ev{ID: i, V: 1, At: ten.Add(time.Duration(i) * time.Minute)}
	}
	close(f.items)
	res, err := run.Wait()
	require.NoError(t, err)
	total := 0
	for _, w := range log.wait(0) {
		if w.Start.Equal(ten) {
			total = w.Count // an Update replaces what came before
		}
	}
	assert.Equal(t, 0, len(lateCol.Items()), "in-order items after an outage are not late")
	assert.Equal(t, int64(0), nodeOf(t, res, "hourly").Late)
	assert.Equal(t, 60, total, "the hour [10:00, 11:00) holds its 60 items")
}
