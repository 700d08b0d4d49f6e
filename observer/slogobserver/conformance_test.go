package slogobserver_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/observer/observertest"
	"github.com/sluicehq/sluice/observer/slogobserver"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for name, every := range map[string]time.Duration{
		// The runs take milliseconds: their repeated events are summed up
		// when their nodes complete.
		"summaries":   time.Hour,
		"every event": 0,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, buf := logger(slog.LevelDebug)
			obs := slogobserver.New(l, slogobserver.WithSummaryEvery(every))
			defer obs.Close()
			observertest.Run(t, observertest.Subject{
				Observer: obs,
				Events:   observertest.AllEvents(),
				Counts:   func() (observertest.Counts, error) { return conformanceCounts(t, buf), nil },
			})
		})
	}
}

// conformanceCounts counts the events the records tell of: one each, or a
// summary's count.
func conformanceCounts(t *testing.T, buf *logBuffer) observertest.Counts {
	c := observertest.Counts{}
	for _, r := range buf.records(t) {
		k := observertest.Key{Pipeline: r["pipeline"].(string), Node: r["node"].(string)}
		n := 1
		switch r["msg"] {
		case slogobserver.MsgNodeStarted:
			k.Event = observertest.NodeStarted
		case slogobserver.MsgNodeCompleted, slogobserver.MsgNodeStopped, slogobserver.MsgNodeFailed:
			k.Event = observertest.NodeCompleted
		case slogobserver.MsgRetry:
			k.Event, k.Detail = observertest.Retry, r["kind"].(string)
		case slogobserver.MsgRetriesExhausted:
			k.Event, k.Detail = observertest.RetryExhausted, r["kind"].(string)
		case slogobserver.MsgDeadLettered:
			k.Event = observertest.DeadLetter
		case slogobserver.MsgDropped:
			k.Event = observertest.Drop
		case slogobserver.MsgCircuitChanged:
			k.Event, k.Detail = observertest.CircuitStateChanged, r["to"].(string)
		case slogobserver.MsgExhaustedRetries:
			k.Event, k.Detail, n = observertest.RetryExhausted, r["kind"].(string), int(r["count"].(float64))
		case slogobserver.MsgDeadLetters:
			k.Event, n = observertest.DeadLetter, int(r["count"].(float64))
		case slogobserver.MsgDrops:
			k.Event, n = observertest.Drop, int(r["count"].(float64))
		default:
			t.Errorf("unknown message %q", r["msg"])
		}
		c.Add(k, n)
	}
	return c
}
