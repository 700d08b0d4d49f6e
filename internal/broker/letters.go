package broker

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/deadletter"
)

// NoDeadLetterSink is the reason of the config error of a broker source
// that needs the pipeline's dead-letter sink for what it named and was
// given none.
const NoDeadLetterSink = "the pipeline's dead-letter sink, and the pipeline has none: give it pipeline.WithDeadLetter"

// Letters is the dead-letter sink that the engine gives a broker source
// before each run (deadletter.DeadLetterWriter), with the envelope of
// what the engine knows, for the letters the source writes itself: a
// poison message, one that crashed the consumer. The zero Letters has no
// sink. It is safe for concurrent use.
type Letters struct {
	mu   sync.Mutex
	sink deadletter.Sink
	base deadletter.Envelope
}

// Use keeps sink and base, as the source's UseDeadLetter is told them.
func (l *Letters) Use(sink deadletter.Sink, base deadletter.Envelope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sink, l.base = sink, base
}

// Sink returns the sink, nil for none.
func (l *Letters) Sink() deadletter.Sink {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sink
}

// Letter returns the sink (nil for none) and the envelope of a message
// the source dead-letters itself: the engine's base, with item and its
// type, err and its text, the message's correlation id, and now as its
// last failure.
func (l *Letters) Letter(item any, itemType string, err error, id string, now time.Time) (deadletter.Sink, deadletter.Envelope) {
	l.mu.Lock()
	sink, env := l.sink, l.base
	l.mu.Unlock()
	env.Item, env.ItemType = item, itemType
	env.Err, env.ErrText = err, err.Error()
	env.CorrelationID = id
	env.LastFailure = now
	return sink, env
}
