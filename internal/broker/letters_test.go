package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
)

// A source's own letter starts from what the engine told it, with the
// message, its error and when; without a sink it says so.
func TestLetters(t *testing.T) {
	t.Parallel()
	var l broker.Letters
	assert.Nil(t, l.Sink())
	sink, _ := l.Letter("m", "T", errors.New("x"), "id", time.Time{})
	assert.Nil(t, sink)

	mem := deadletter.NewMemory(1)
	l.Use(mem, deadletter.Envelope{Pipeline: "p", RunID: "r", OriginNode: "src", DecisionNode: "src"})
	assert.Equal(t, deadletter.Sink(mem), l.Sink())
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	why := errors.New("poison: failed 3 runs")
	sink, env := l.Letter("m", "T", why, "id-1", now)
	assert.Equal(t, deadletter.Sink(mem), sink)
	assert.Equal(t, deadletter.Envelope{Pipeline: "p", RunID: "r", OriginNode: "src", DecisionNode: "src",
		Item: "m", ItemType: "T", Err: why, ErrText: why.Error(), CorrelationID: "id-1", LastFailure: now}, env)
}
