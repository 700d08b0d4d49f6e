package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
)

// handOffState is what a root tracker knows of its item's hand-off.
type handOffState struct {
	item  deadletter.HandOffItem
	after time.Duration
	// resume: where the item's delivery continues its retries (Node ""
	// once taken).
	resume deadletter.Resume
	// split: the item was ever split into parts (broadcast, FlatMap,
	// Unbatch): a part cannot be delivered again alone.
	split atomic.Bool
}

// newHandOff returns the hand-off state of item emitted by a source whose
// threshold is after, or nil when the item cannot be handed off.
func newHandOff[T any](item T, after time.Duration) *handOffState {
	hi, ok := any(item).(deadletter.HandOffItem)
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
func resumed(hi deadletter.HandOffItem) (r deadletter.Resume, ok bool) {
	defer func() {
		if recover() != nil {
			r, ok = deadletter.Resume{}, false
		}
	}()
	return hi.Resumed()
}

// resume returns where the item's first call at node continues its
// retries, the zero Resume when it starts afresh; it is taken once.
func (t *tracker) resume(node string) deadletter.Resume {
	if t == nil || t.extra == nil || t.extra.ho == nil || t.extra.ho.resume.Node == "" || t.extra.ho.resume.Node != node {
		return deadletter.Resume{}
	}
	r := t.extra.ho.resume
	t.extra.ho.resume.Node = ""
	return r
}

// handOffFor returns the hand-off state of t when its item can be handed
// off for a wait of d: t is a root tracker whose source takes over waits
// of d and more, and the item was never split into parts (a part of a
// broadcast or a FlatMap could not be delivered again alone, and another
// part may already be written).
func (t *tracker) handOffFor(d time.Duration) *handOffState {
	if h := t.handOffAny(); h != nil && d >= h.after {
		return h
	}
	return nil
}

// handOffAny returns the hand-off state of t when its item can be handed
// off for a wait of any length, as a drain hands back parked items: see
// handOffFor, without the threshold.
func (t *tracker) handOffAny() *handOffState {
	if t == nil || t.extra == nil || t.extra.ho == nil || t.extra.ho.after <= 0 || t.done == nil || t.extra.ho.split.Load() || t.refs.Load() != 1 {
		return nil
	}
	return t.extra.ho
}

// handOff gives item's retry to its source's broker; it reports whether
// the broker took it.
func (nr *nodeRun) handOff(ctx context.Context, h *handOffState, item any, tr *tracker, fl *failure, retry int, d time.Duration, since time.Time) bool {
	env, err := nr.envelope(item, tr, fl)
	if err != nil {
		return false
	}
	herr := protect(func() {
		err = h.item.HandOff(ctx, deadletter.HandOff{Envelope: env, Retry: retry, Delay: d, Since: since})
	})
	return herr == nil && err == nil
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
