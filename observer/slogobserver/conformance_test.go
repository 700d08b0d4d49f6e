package slogobserver_test

import (
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/observer/observertest"
	"github.com/sluicehq/sluice/observer/slogobserver"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	l, buf := logger(slog.LevelDebug)
	observertest.Run(t, observertest.Subject{
		Observer: slogobserver.New(l),
		Events:   observertest.AllEvents(),
		Counts: func() (observertest.Counts, error) {
			c := observertest.Counts{}
			for _, r := range buf.records(t) {
				k := observertest.Key{Pipeline: r["pipeline"].(string), Node: r["node"].(string)}
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
				default:
					t.Errorf("unknown message %q", r["msg"])
				}
				c.Add(k, 1)
			}
			return c, nil
		},
	})
}
