package slogobserver_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
)

// The late items of an event-time window, however late each was, share
// one reason: their dead letters and drops are summed in one record
// whose count is the node's late items.
func TestLateItemsShareAReason(t *testing.T) {
	t.Parallel()
	wm := time.Date(2026, 12, 1, 11, 30, 0, 0, time.UTC)
	a := &pipeline.LateError{EventTime: wm.Add(-90 * time.Minute), Watermark: wm, AllowedLateness: time.Hour}
	b := &pipeline.LateError{EventTime: wm.Add(-26 * time.Hour), Watermark: wm.Add(17 * time.Second)}
	assert.Equal(t, slogobserver.Reason(a), slogobserver.Reason(b))
	assert.Equal(t, "pipeline: late item: its event time #:#:# is # behind the watermark #:#:# (allowed lateness #)", slogobserver.Reason(a))
}
