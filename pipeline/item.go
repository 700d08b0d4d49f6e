package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// A failure is what layer 1 knows of an item it could not process.
type failure struct {
	err     error
	calls   int // calls made in this attempt, the first included
	history []deadletter.Attempt
	first   time.Time
	last    time.Time
}

// ErrTooManyRepeats is matched by the error of a node that was asked to
// call one item more than [resilience.MaxRepeats] + 1 times across its
// layers (item retries within node restarts).
var ErrTooManyRepeats = errors.New("pipeline: item repeated too many times")

// safeCall calls f, turning a panic into a *resilience.PanicError.
func safeCall[In, R any](ctx context.Context, f func(context.Context, In) (R, error), in In) (r R, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &resilience.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f(ctx, in)
}

// attempt is layer 1: it calls f on one item until it succeeds, fails
// permanently or runs out of retries, asking the node's breaker before
// every call. prior counts calls made on the item before a restart. ctx is
// the context of the node's current body.
func attempt[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, prior int) (R, *failure) {
	n := nr.spec
	if n.res.ItemRetry.MaxRetries == 0 && n.breaker == nil && prior == 0 {
		r, err := safeCall(ctx, f, in)
		if err != nil {
			return r, nr.oneFailure(err)
		}
		return r, nil
	}
	return retry(ctx, nr, f, in, prior, nil)
}

// retry runs layer 1's loop. When first is not nil, the first call was
// already made, without a breaker, and failed with first.
func retry[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, prior int, first error) (R, *failure) {
	n := nr.spec
	o := &n.res.ItemRetry
	var fl *failure
	var zero R
	for retry := 0; ; retry++ {
		var (
			r      R
			err    error
			permit resilience.Permit
		)
		if retry == 0 && first != nil {
			err = first
		} else {
			if prior+retry > resilience.MaxRepeats {
				err := &notRestartable{fmt.Errorf("%w: %d calls of one item, more than %d repeats", ErrTooManyRepeats, prior+retry, resilience.MaxRepeats)}
				return zero, nr.failed(fl, err, retry, 0)
			}
			if n.breaker != nil {
				p, err := nr.allow(ctx)
				if err != nil {
					return zero, nr.failed(fl, err, retry, 0)
				}
				permit = p
			}
			r, err = safeCall(ctx, f, in)
			if err == nil {
				if n.breaker != nil {
					n.breaker.Record(permit, resilience.CallSuccess)
				}
				return r, nil
			}
		}
		transient, perr := classify(ctx, o.Classifier, err)
		if perr != nil {
			return zero, nr.failed(fl, perr, retry+1, 0)
		}
		if n.breaker != nil && !(retry == 0 && first != nil) {
			res := resilience.CallIgnored
			if transient {
				res = resilience.CallFailure
			}
			n.breaker.Record(permit, res)
		}
		if !transient {
			return zero, nr.failed(fl, err, retry+1, 0)
		}
		if retry >= o.MaxRetries {
			fl = nr.failed(fl, err, retry+1, 0)
			if retry > 0 {
				fl.err = nr.exhausted(resilience.ItemRetry, retry+1, err)
			}
			return zero, fl
		}
		d, perr := delay(o.Backoff, retry+1, nr.rs.p.cfg.rand)
		if perr != nil {
			return zero, nr.failed(fl, perr, retry+1, 0)
		}
		fl = nr.failed(fl, err, retry+1, d)
		n.stats.retry(resilience.ItemRetry)
		nr.rs.notify(n, func(ob observer.Observer) {
			ob.OnRetry(observer.RetryEvent{Event: nr.rs.event(n), Kind: resilience.ItemRetry, Attempt: retry + 1, Delay: d, Err: err})
		})
		if werr := nr.rs.wait(ctx, d); werr != nil {
			fl.err = werr
			return zero, fl
		}
	}
}

// oneFailure is the failure of an item after its only call.
func (nr *nodeRun) oneFailure(err error) *failure {
	now := nr.rs.p.cfg.clock.Now()
	return &failure{err: err, calls: 1, first: now, last: now, history: nr.history(nil, 0, 0, now, err)}
}

// failed adds one failed call to fl; delay is the wait chosen before the
// next call, 0 for the last.
func (nr *nodeRun) failed(fl *failure, err error, calls int, delay time.Duration) *failure {
	now := nr.rs.p.cfg.clock.Now()
	if fl == nil {
		fl = &failure{first: now}
	}
	fl.err, fl.calls, fl.last = err, calls, now
	if calls > 0 && nr.spec.res.OnItemFailure == resilience.DeadLetter {
		fl.history = nr.history(fl.history, calls-1, delay, now, err)
	}
	return fl
}

func (nr *nodeRun) history(h []deadletter.Attempt, retry int, delay time.Duration, now time.Time, err error) []deadletter.Attempt {
	if nr.spec.res.OnItemFailure != resilience.DeadLetter {
		return h
	}
	return append(h, deadletter.Attempt{Time: now, Layer: resilience.ItemRetry, Retry: retry, Delay: delay, Err: err.Error()})
}

// allow asks the node's breaker for a permit. Under OpenPause it waits,
// which stops the node reading, until the breaker lets a call through or
// MaxPause has passed.
func (nr *nodeRun) allow(ctx context.Context) (resilience.Permit, error) {
	br, o := nr.spec.breaker, &nr.spec.res.CircuitBreaker
	clock := nr.rs.p.cfg.clock
	var deadline time.Time
	for {
		changed := br.Changed()
		p, err := br.Allow()
		if err == nil || o.WhenOpen != resilience.OpenPause {
			return p, err
		}
		var coe *resilience.CircuitOpenError
		errors.As(err, &coe)
		now := clock.Now()
		if deadline.IsZero() {
			deadline = now.Add(o.MaxPause)
		}
		if !now.Before(deadline) {
			return p, err
		}
		until := deadline
		if coe != nil && coe.Until.After(now) && coe.Until.Before(deadline) {
			until = coe.Until
		}
		t := clock.NewTimer(until.Sub(now))
		select {
		case <-t.Chan():
		case <-changed:
		case <-ctx.Done():
			t.Stop()
			return p, context.Cause(ctx)
		}
		t.Stop()
	}
}

// itemFailed applies the node's failure action to an item that layer 1
// gave up on. It returns nil when the item was skipped or dead-lettered,
// and the error that fails the node otherwise. ctx is the context of the
// node's current body: when it is done, the failure is only its echo and is
// neither counted nor dead-lettered.
func (nr *nodeRun) itemFailed(ctx context.Context, item any, tr *tracker, fl *failure) error {
	if isCancellation(ctx, fl.err) {
		return fl.err
	}
	n, rs := nr.spec, nr.rs
	n.stats.failed.Add(1)
	var nrs *notRestartable
	if errors.Is(fl.err, resilience.ErrCircuitOpen) || errors.As(fl.err, &nrs) {
		return fl.err
	}
	switch n.res.OnItemFailure {
	case resilience.Skip:
		n.stats.skipped.Add(1)
		rs.notify(n, func(o observer.Observer) {
			o.OnDrop(observer.DropEvent{Event: rs.event(n), Attempts: fl.calls, Err: fl.err})
		})
		if tr != nil {
			tr.finish(outcomeOf(resilience.Skip))
		}
		return nil
	case resilience.DeadLetter:
		if err := nr.deadLetter(ctx, item, fl); err != nil {
			return err
		}
		n.stats.deadLettered.Add(1)
		rs.notify(n, func(o observer.Observer) {
			o.OnDeadLetter(observer.DeadLetterEvent{Event: rs.event(n), OriginNode: n.name, Attempts: fl.calls, Err: fl.err})
		})
		if tr != nil {
			tr.finish(outcomeOf(resilience.DeadLetter))
		}
		return nil
	default:
		return fl.err
	}
}

// deadLetter writes item's envelope to the dead-letter sink, retrying with
// the sink's own backoff. When the sink still fails, the run fails with
// both the item's error and the sink's.
func (nr *nodeRun) deadLetter(ctx context.Context, item any, fl *failure) error {
	n, rs := nr.spec, nr.rs
	env := deadletter.Envelope{
		Item: item, Err: fl.err, ErrText: fl.err.Error(),
		Pipeline: rs.p.name, RunID: rs.id, OriginNode: n.name, DecisionNode: n.name,
		Attempts: fl.calls, History: fl.history, FirstFailure: fl.first, LastFailure: fl.last,
	}
	if c, ok := item.(deadletter.Correlated); ok {
		id, err := correlationID(c)
		if err != nil {
			return err
		}
		env.CorrelationID = id
	}
	o := rs.p.cfg.dlRetry
	var err error
	for retry := 0; ; retry++ {
		err = safeWrite(ctx, rs.p.cfg.deadLetter, env)
		if err == nil {
			return nil
		}
		if isCancellation(ctx, err) || retry >= o.maxRetries {
			break
		}
		d, perr := delay(o.backoff, retry+1, rs.p.cfg.rand)
		if perr != nil {
			return perr
		}
		if werr := rs.wait(ctx, d); werr != nil {
			return werr
		}
	}
	if isCancellation(ctx, err) {
		return err
	}
	return &notRestartable{errors.Join(fl.err, fmt.Errorf("pipeline: dead-letter sink failed: %w", err))}
}

func safeWrite(ctx context.Context, s deadletter.Sink, env deadletter.Envelope) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &resilience.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return s.Write(ctx, env)
}

// classify asks c whether err is transient for work under ctx. A panic in
// one of the user's rules fails the node: it is a bug in the policy, not in
// the item.
func classify(ctx context.Context, c resilience.Classifier, err error) (transient bool, perr error) {
	defer func() {
		if v := recover(); v != nil {
			perr = &notRestartable{fmt.Errorf("pipeline: classifier rule panicked: %w", &resilience.PanicError{Value: v, Stack: debug.Stack()})}
		}
	}()
	return c.IsTransientContext(ctx, err), nil
}

// delay returns the backoff's delay before retry n. A panic in a custom
// backoff fails the node.
func delay(b resilience.Backoff, n int, r resilience.Rand) (d time.Duration, perr error) {
	defer func() {
		if v := recover(); v != nil {
			perr = &notRestartable{fmt.Errorf("pipeline: custom backoff panicked: %w", &resilience.PanicError{Value: v, Stack: debug.Stack()})}
		}
	}()
	return b.DelayForRand(n, r), nil
}

// correlationID asks an item for its correlation id; a panic fails the node.
func correlationID(c deadletter.Correlated) (id string, perr error) {
	defer func() {
		if v := recover(); v != nil {
			perr = &notRestartable{fmt.Errorf("pipeline: CorrelationID panicked: %w", &resilience.PanicError{Value: v, Stack: debug.Stack()})}
		}
	}()
	return c.CorrelationID(), nil
}
