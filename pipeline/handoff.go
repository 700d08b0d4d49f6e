package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
)

// A HandOffSource is a source whose broker can take over an item's long
// wait: when a node's item retry would wait at least HandOffAfter before
// its next call, the engine does not hold a worker for the wait; it hands
// the item back to the source's broker (see [HandOffItem]), which delivers
// it again after the wait. Shorter waits stay in process. HandOffAfter
// returns 0 when the source takes over no wait.
//
// RabbitMQ's source offers this with its retry topology's HandOffAfter.
type HandOffSource interface {
	HandOffAfter() time.Duration
}

// A HandOffItem is an item that a [HandOffSource] emits with EmitTracked
// and can hand back to its broker.
//
// HandOff asks the broker to deliver the item again after h.Delay, with
// the story of its calls so far (h.Envelope). It returns nil once the
// broker holds the item: the item's done then runs with node.HandedOff,
// and the delivery is settled. An error keeps the item in process: the
// node waits the delay itself and retries, as without hand-off. HandOff
// runs on the node's goroutine and may block, as a dead-letter write does.
//
// Resumed says where the item's previous delivery was handed off (ok
// false for none): the node, the retry its next call makes there, and
// when the retries started. That node's item retry then continues the
// count (its first call is that retry, its next delay the backoff's for
// the retry after it, and MaxElapsed counts from Since) instead of
// starting again.
type HandOffItem interface {
	HandOff(ctx context.Context, h HandOff) error
	Resumed() (r Resume, ok bool)
}

// A Resume is where a hand-off left an item's retries.
type Resume struct {
	// Node is the node whose item retry handed the item off.
	Node string
	// Retry is the retry the item's next call at Node makes (HandOff.Retry).
	Retry int
	// Since is when the retries started (HandOff.Since); zero for unknown.
	Since time.Time
}

// A HandOff is an item's retry given to its source's broker.
type HandOff struct {
	// Envelope tells the item's story so far, as a dead letter would:
	// Item, Err (the failure that asked for the retry), the node
	// (OriginNode and DecisionNode), Attempts, History, FirstFailure and
	// LastFailure. History is kept only when the node may dead-letter.
	Envelope deadletter.Envelope
	// Retry is the item retry that the next delivery makes at the node:
	// the one that would have waited.
	Retry int
	// Delay is the wait the node's backoff (or the error's Retry-After)
	// chose before that retry.
	Delay time.Duration
	// Since is when the item's retries at the node started, on the
	// pipeline's clock: the item retry's MaxElapsed counts from there, in
	// this delivery and the next ones. Give it back in Resume.Since.
	Since time.Time
}

// handOffState is what a root tracker knows of its item's hand-off.
type handOffState struct {
	item  HandOffItem
	after time.Duration
	// resume: where the item's delivery continues its retries (Node ""
	// once taken).
	resume Resume
	// split: the item was ever split into parts (broadcast, FlatMap,
	// Unbatch): a part cannot be delivered again alone.
	split atomic.Bool
}

// newHandOff returns the hand-off state of item emitted by a source whose
// threshold is after, or nil when the item cannot be handed off.
func newHandOff[T any](item T, after time.Duration) *handOffState {
	hi, ok := any(item).(HandOffItem)
	if !ok {
		return nil
	}
	h := &handOffState{item: hi, after: after}
	if r, ok := resumed(hi); ok && r.Retry > 0 && r.Node != "" {
		h.resume = r
	}
	return h
}

// resumed calls the item's Resumed under the panic guard: a panic says
// nothing was handed off.
func resumed(hi HandOffItem) (r Resume, ok bool) {
	defer func() {
		if recover() != nil {
			r, ok = Resume{}, false
		}
	}()
	return hi.Resumed()
}

// resume returns where the item's first call at node continues its
// retries, the zero Resume when it starts afresh; it is taken once.
func (t *tracker) resume(node string) Resume {
	if t == nil || t.ho == nil || t.ho.resume.Node == "" || t.ho.resume.Node != node {
		return Resume{}
	}
	r := t.ho.resume
	t.ho.resume.Node = ""
	return r
}

// handOffFor returns the hand-off state of t when its item can be handed
// off for a wait of d: t is a root tracker whose source takes over waits
// of d and more, and the item was never split into parts (a part of a
// broadcast or a FlatMap could not be delivered again alone, and another
// part may already be written).
func (t *tracker) handOffFor(d time.Duration) *handOffState {
	if t == nil || t.ho == nil || t.ho.after <= 0 || d < t.ho.after || t.done == nil || t.ho.split.Load() || t.refs.Load() != 1 {
		return nil
	}
	return t.ho
}

// handOff gives item's retry to its source's broker; it reports whether
// the broker took it.
func (nr *nodeRun) handOff(ctx context.Context, h *handOffState, item any, fl *failure, retry int, d time.Duration, since time.Time) bool {
	env, err := nr.envelope(item, fl)
	if err != nil {
		return false
	}
	herr := protect(func() {
		err = h.item.HandOff(ctx, HandOff{Envelope: env, Retry: retry, Delay: d, Since: since})
	})
	return herr == nil && err == nil
}

// A DeadLetterWriter is a source that writes some items to the pipeline's
// dead-letter sink itself, such as a broker source that dead-letters a
// poison message instead of emitting it again. Before each run opens the
// source, the engine calls UseDeadLetter with the run's dead-letter sink
// (nil when the pipeline has none) and an envelope holding what the engine
// knows: Pipeline, RunID, and the source's name as OriginNode and
// DecisionNode. The node fills in the rest (Item, ItemType, Err, ErrText,
// Attempts, ...). A write the sink refuses is the node's to report: it must
// not drop the item.
//
// A letter the sink stores counts in the source's DeadLettered, one the
// sink gives back to the broker (a [deadletter.BrokerRetrier]) in its
// BrokerRetries, and observers get OnDeadLetter for either, as for a
// letter a node writes.
type DeadLetterWriter interface {
	UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope)
}

// sourceLetters is the dead-letter sink a DeadLetterWriter source writes
// to: the run's, counted for the source and told to observers.
type sourceLetters struct {
	rs *runState
	n  *spec
}

func (s *sourceLetters) Write(ctx context.Context, env deadletter.Envelope) error {
	_, err := s.WriteOrRetry(ctx, env)
	return err
}

func (s *sourceLetters) WriteOrRetry(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	retried, err = safeWrite(ctx, s.rs.p.cfg.deadLetter, env)
	if err != nil {
		return false, err
	}
	if retried {
		s.n.stats.brokerRetries.Add(1)
	} else {
		s.n.stats.deadLettered.Add(1)
	}
	notify(s.rs, s.n, observer.Observer.OnDeadLetter, observer.DeadLetterEvent{Event: s.rs.event(s.n), Key: env.CorrelationID,
		OriginNode: env.OriginNode, Attempts: env.Attempts, Err: env.Err, BrokerRetry: retried})
	return retried, nil
}
