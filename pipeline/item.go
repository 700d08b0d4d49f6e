package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
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
	// handedOff: the item's source took its retry over (HandOffItem); it
	// is not a failure.
	handedOff bool
	// What earlier attempts, before node restarts replayed the item, left:
	// their calls, their entries at the start of history, and how many
	// restarts replayed it.
	before, base, restarts int
	// park, when not nil, says the item is not done: layer 1 chose to
	// wait park.wait before its next call and the node parks it (see
	// parking) instead of holding its worker.
	park *retryState
	// failedAt, when set, is when the call that record records next
	// failed, if not now (a MapBatch batch call).
	failedAt time.Time
	// late says an event-time Aggregate found the item late: no rule
	// matching, its action is DeadLetter, not OnItemFailure.
	late bool
}

// A retryState is layer 1's loop state of a parked item: what itemRetry
// takes up when the item's wait ends.
type retryState struct {
	fl             failure
	calls, retry   int
	pause, started time.Time
	// until is when the wait that parked the item ends: when the retry
	// was decided, plus the wait. An item that first waits for room in a
	// full parking parks only for what is left of it.
	until time.Time
	// late is how late the item's timer fired: on the real clock a
	// runtime timer's own delay, which a wait in place has too and
	// which MaxElapsed does not count (see itemRetryFrom).
	late time.Duration
	// failedAt, when set, is when the call whose error itemRetry is given
	// as first failed (a MapBatch batch call): the wait after it counts
	// from then. probe says that call was a half-open breaker's probe.
	failedAt time.Time
	probe    bool
	// slot is where an ordered node's collector waits for the item's
	// result; nil on other nodes.
	slot *parkSlot
	// recalled says a drain took the item out of its wait, for its
	// source's broker to take it back (see parking.recall); kept says the
	// broker refused it, and the item waits its wait here.
	recalled, kept bool
}

// again returns what a replay of the item after a node restart starts
// from: fl's calls, history and first failure, carried over. The history
// is clipped, so that the replay's entries never write into fl's.
func (fl *failure) again() *failure {
	return &failure{
		before: fl.before + fl.calls, base: len(fl.history), restarts: fl.restarts + 1,
		history: fl.history[:len(fl.history):len(fl.history)], first: fl.first, last: fl.last,
	}
}

// total is the calls the item had, across node restarts.
func (fl *failure) total() int { return fl.before + fl.calls }

// ErrTooManyRepeats is matched by the error of a node that was asked to
// call one item more than [resilience.MaxRepeats] + 1 times across its
// layers (item retries within node restarts).
var ErrTooManyRepeats = errors.New("pipeline: item repeated too many times")

// call calls f under the panic guard.
func call[In, R any](ctx context.Context, f func(context.Context, In) (R, error), in In) (r R, err error) {
	defer recovered(&err)
	return f(ctx, in)
}

// traced calls f under the panic guard, in a span of the run's tracer
// when it has one; number is the item's call on the node, 1 for its first.
// A tracer that panics fails the run, and the call is not made.
func traced[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, tr *tracker, number int) (r R, err error) {
	r, _, err = tracedCall(ctx, nr, f, in, tr, number)
	return r, err
}

// tracedCall is traced that also says whether f was called: not when the
// tracer panicked starting the attempt.
func tracedCall[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, tr *tracker, number int) (r R, called bool, err error) {
	t := nr.rs.tracer
	ctx = callsWithStop(nr, ctx, nr.enterCall(ctx))
	defer nr.leaveCall()
	if t == nil || !callsUser(nr.spec) {
		r, err = call(ctx, f, in)
		return r, true, err
	}
	rs, n := nr.rs, nr.spec
	a := observer.Attempt{Pipeline: rs.p.name, RunID: rs.id, Node: n.name, Key: keyOf(in, tr), Number: number, Links: tr.links()}
	sctx, end, terr := startAttempt(ctx, t, a)
	if terr != nil {
		terr = fmt.Errorf("pipeline: tracer panicked starting attempt %d: %w", number, terr)
		rs.fail(n.name, terr)
		return r, false, causeOr(ctx, terr)
	}
	r, err = call(sctx, f, in)
	if terr := endAttempt(end, err); terr != nil {
		terr = fmt.Errorf("pipeline: tracer panicked ending attempt %d: %w", number, terr)
		rs.fail(n.name, terr)
		if err == nil {
			// The run fails: the item is not delivered as if all went well.
			err = causeOr(ctx, terr)
		}
	}
	return r, true, err
}

// causeOr returns ctx's cause, or err while ctx is not done yet.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return err
}

func startAttempt(ctx context.Context, t observer.Tracer, a observer.Attempt) (sctx context.Context, end func(error), err error) {
	defer recovered(&err)
	sctx, end = t.StartAttempt(ctx, a)
	if sctx == nil {
		sctx = ctx
	}
	return sctx, end, nil
}

func endAttempt(end func(error), cerr error) (err error) {
	if end == nil {
		return nil
	}
	defer recovered(&err)
	end(cerr)
	return nil
}

// withAttemptTimeout gives every call of f a context with a deadline d
// later on clock. A call that fails once that deadline passed, while the
// node's own context is live, fails with a *resilience.AttemptTimeoutError
// around its error.
func withAttemptTimeout[In, R any](f func(context.Context, In) (R, error), d time.Duration, clock clockwork.Clock) func(context.Context, In) (R, error) {
	return func(ctx context.Context, in In) (R, error) {
		deadline := clock.Now().Add(d)
		cctx, cancel := withDeadlineOn(ctx, clock, deadline)
		defer cancel()
		r, err := f(cctx, in)
		// Past the deadline by one reading of the clock once the call
		// returned: the clock is what counts, not whether the context's own
		// timer was seen to fire (it fires only once the clock is there).
		if err != nil && ctx.Err() == nil && !clock.Now().Before(deadline) {
			err = &resilience.AttemptTimeoutError{Timeout: d, Err: err}
		}
		return r, err
	}
}

// idleFunc hands over what the calling goroutine gathered and publishes
// its counts; layer 1 calls it before it waits on the clock, so that
// results already made do not wait behind a retry's backoff or a pause.
type idleFunc func(ctx context.Context) error

func (f idleFunc) run(ctx context.Context) error {
	if f == nil {
		return nil
	}
	return f(ctx)
}

// attempt is layer 1: it calls f on one item until it succeeds, fails
// permanently or runs out of retries, asking the node's breaker before
// every call. prior is what the item's attempts before a node restart
// left (see failure.again), nil for an item's first attempt. ctx is
// the context of the node's current body; idle, if not nil, runs before
// each wait.
//
// When parks is set, a wait chosen by the retry policy (backoff,
// RetryAfter) is not waited: the item's loop state comes back in the
// failure's park field, and from, when not nil, is such a state to take
// up once the wait ended.
func attempt[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, tr *tracker, prior *failure, idle idleFunc, from *retryState, parks bool) (R, *failure) {
	n := nr.spec
	if n.res.ItemRetry.MaxRetries == 0 && n.breaker == nil && prior == nil && from == nil {
		r, err := traced(ctx, nr, f, in, tr, 1)
		if err != nil {
			return r, nr.failed(ctx, err)
		}
		return r, nil
	}
	return itemRetryFrom(ctx, nr, f, in, tr, prior, nil, nil, idle, from, parks)
}

// itemRetry runs layer 1's loop. When first is not nil, the first call was
// already made and failed with first; held, if not nil, is the breaker
// permit it was made under, which itemRetry reports.
//
// A failure once ctx is done is only the echo of the cancellation: it is
// neither classified, retried nor counted, and the failure returned holds
// ctx's cause. Under OpenPause, a call the breaker refuses waits instead,
// and a probe that fails while the breaker pauses does not spend one of
// the item's retries: an outage becomes backpressure, bounded by MaxPause
// from the item's first refusal.
func itemRetry[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, tr *tracker, prior *failure, first error, held *resilience.Permit, idle idleFunc) (R, *failure) {
	return itemRetryFrom(ctx, nr, f, in, tr, prior, first, held, idle, nil, false)
}

// itemRetryFrom is itemRetry that may park (see attempt): parks lets it
// return the item's loop state instead of waiting, and from is the state
// of a parked item whose wait ended.
func itemRetryFrom[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, tr *tracker, prior *failure, first error, held *resilience.Permit, idle idleFunc, from *retryState, parks bool) (R, *failure) {
	n := nr.spec
	o := &n.res.ItemRetry
	pausing := n.breaker != nil && n.res.CircuitBreaker.WhenOpen == resilience.OpenPause
	var (
		// fl stays on the stack: only a failure for good copies it out,
		// so that a retry that succeeds allocates nothing.
		fl      failure
		zero    R
		calls   int       // calls made in this cycle
		pause   time.Time // under OpenPause: when the item's pause ends
		started time.Time // under MaxElapsed: the first failure
	)
	retry := 0
	// owed says a retry was decided and waited for in place: it counts in
	// the node's retries when its call is made, not when a breaker that
	// stays open, MaxElapsed or the run's end gives it up first.
	owed := false
	var failedAt time.Time // when first's call failed, when not now
	firstProbe := false
	if from != nil {
		fl, calls, retry, pause, started = from.fl, from.calls, from.retry, from.pause, from.started
		failedAt, firstProbe = from.failedAt, from.probe
		if o.MaxElapsed > 0 && !from.until.IsZero() && ctx.Err() == nil &&
			nr.rs.p.cfg.clock.Since(started)-from.late > o.MaxElapsed {
			// The item waited parked, and its retry comes later than its
			// wait: the parking was full, or no worker was free when the
			// wait ended. No retry starts past MaxElapsed all the same.
			fl.err = nr.exhaustedBy(resilience.ItemRetry, calls, fl.err, resilience.LimitElapsed, keyOf(in, tr))
			return zero, fl.out()
		}
		if from.recalled {
			from.recalled = false
			if rest := from.until.Sub(nr.rs.p.cfg.clock.Now()); rest > 0 {
				// The run drains: the broker takes the rest of the wait
				// over, as it takes a wait of HandOffAfter.
				if nr.handBack(ctx, in, tr, &fl, retry, rest, started) {
					n.stats.retry(resilience.ItemRetry)
					fl.handedOff = true
					return zero, fl.out()
				}
				// It waits here, as a hand-off the broker refuses does.
				from.kept = true
				return zero, &failure{park: from}
			}
			// Its wait ended meanwhile: it is retried here.
		}
		// The retry the item parked for counts once its call is made.
		owed = !from.until.IsZero()
	} else if prior != nil {
		fl = *prior
	} else if r := tr.resume(n.name); r.Retry > 0 {
		// A delivery after a hand-off continues the retries it had.
		retry, started = r.Retry, r.Since
	}
	for {
		var (
			err              error
			transient, probe bool
			at               time.Time // when err's call failed, if before now
		)
		if first != nil {
			err, first = first, nil
			at, failedAt = failedAt, time.Time{}
			probe = firstProbe
			calls++
			if ctx.Err() == nil {
				transient, err = classify(ctx, o.Classifier, err)
			}
			if held != nil {
				result := resilience.CallIgnored
				if transient {
					result = resilience.CallFailure
				}
				n.breaker.Record(*held, result)
				probe, held = held.Probe(), nil
			}
		} else {
			// Every call counts, a probe's too: Validate keeps one pause's
			// probes within the cap, restarts could multiply them.
			if fl.before+calls > resilience.MaxRepeats {
				err := &notRestartable{fmt.Errorf("%w: %d calls of one item, more than %d repeats", ErrTooManyRepeats, fl.before+calls, resilience.MaxRepeats)}
				nr.record(&fl, ctx, err, calls, 0)
				return zero, fl.out()
			}
			if ctx.Err() != nil {
				// No call once the run stops.
				nr.record(&fl, ctx, nil, calls, 0)
				return zero, fl.out()
			}
			var r R
			var called bool
			var elapsedBy time.Time // no retry starts past it
			if o.MaxElapsed > 0 && !started.IsZero() {
				elapsedBy = started.Add(o.MaxElapsed)
			}
			r, called, transient, probe, err = try(ctx, nr, f, in, tr, fl.before+calls+1, &pause, elapsedBy, idle)
			if called {
				calls++
				if owed {
					n.stats.retry(resilience.ItemRetry)
				}
			}
			owed = false
			if err == nil {
				return r, nil
			}
			if err == errPastElapsed {
				// The retry waited for the breaker (OpenPause) past
				// MaxElapsed: it does not start. fl holds the last
				// call's failure.
				fl.err = nr.exhaustedBy(resilience.ItemRetry, calls, fl.err, resilience.LimitElapsed, keyOf(in, tr))
				return zero, fl.out()
			}
			if !called {
				// Refused by the breaker, or cancelled while paused.
				nr.record(&fl, ctx, err, calls, 0)
				return zero, fl.out()
			}
		}
		// classify says false for the echo of a cancellation; ctx may also
		// have ended since (a classifier rule is the user's code).
		if !transient || ctx.Err() != nil {
			nr.record(&fl, ctx, err, calls, 0)
			return zero, fl.out()
		}
		if probe && pausing {
			// The probe failed and opened the breaker again: the item
			// waits for the next probe, its retries untouched, but not
			// past MaxElapsed from its first failure, which this may be.
			nr.record(&fl, ctx, err, calls, 0)
			if o.MaxElapsed > 0 && started.IsZero() {
				started = nr.rs.p.cfg.clock.Now()
			}
			continue
		}
		if retry >= o.MaxRetries {
			nr.record(&fl, ctx, err, calls, 0)
			if retry > 0 {
				fl.err = nr.exhaustedBy(resilience.ItemRetry, calls, err, resilience.LimitCount, keyOf(in, tr))
			}
			return zero, fl.out()
		}
		retry++
		d, perr := retryDelay(o.Backoff, retry, nr.rs.p.cfg.rand, err)
		if perr != nil {
			nr.record(&fl, ctx, perr, calls, 0)
			return zero, fl.out()
		}
		// now is when the wait is decided, read only when needed: a
		// parked item's wait ends at now+d however long it then waits
		// for room (see parking.park).
		var now time.Time
		if !at.IsZero() || o.MaxElapsed > 0 || (parks && d > 0) {
			now = nr.rs.p.cfg.clock.Now()
		}
		if !at.IsZero() {
			// The wait started when the call failed.
			d = max(0, d-now.Sub(at))
		}
		if o.MaxElapsed > 0 {
			// No retry starts past MaxElapsed from the first failure.
			if started.IsZero() {
				started = now
			}
			if now.Add(d).After(started.Add(o.MaxElapsed)) {
				nr.record(&fl, ctx, err, calls, 0)
				fl.err = nr.exhaustedBy(resilience.ItemRetry, calls, err, resilience.LimitElapsed, keyOf(in, tr))
				return zero, fl.out()
			}
		}
		if b := n.res.RetryBudget; b != nil && !probe && !b.Withdraw() {
			// The shared budget is spent: no retry, the failure action now.
			nr.record(&fl, ctx, err, calls, 0)
			fl.err = nr.exhaustedBy(resilience.ItemRetry, calls, err, resilience.LimitBudget, keyOf(in, tr))
			return zero, fl.out()
		}
		nr.record(&fl, ctx, err, calls, d)
		handedOff := false
		// A Keyed node waits in process: a handed-off item would come back
		// behind its key's later items.
		if h := tr.handOffFor(d); h != nil && n.cfg.keyed == nil {
			since := started
			if since.IsZero() {
				since = nr.rs.p.cfg.clock.Now()
			}
			handedOff = nr.handOff(ctx, h, in, tr, &fl, retry, d, since)
		}
		parkIt := !handedOff && d > 0 && parks && ctx.Err() == nil
		if handedOff {
			// The broker makes the retry.
			n.stats.retry(resilience.ItemRetry)
		} else if !parkIt {
			// Counted when its call is made (owed); a parked item's retry
			// is owed when it is taken up again (itemRetryFrom).
			owed = true
		}
		if nr.rs.observed {
			// Building the event reads the clock: not for nobody.
			notify(nr.rs, n, observer.Observer.OnRetry, observer.RetryEvent{
				Event: nr.rs.event(n), Key: keyOf(in, tr), Kind: resilience.ItemRetry, Attempt: retry, Delay: d, Err: err, HandedOff: handedOff})
		}
		if handedOff {
			fl.handedOff = true
			return zero, fl.out()
		}
		if parkIt {
			// The item waits parked: its worker moves on.
			if werr := idle.run(ctx); werr != nil {
				nr.record(&fl, ctx, werr, calls, 0)
				return zero, fl.out()
			}
			fl.calls = calls
			st := &retryState{fl: fl, calls: calls, retry: retry, pause: pause, started: started, until: now.Add(d)}
			return zero, &failure{park: st}
		}
		if d > 0 {
			werr := idle.run(ctx)
			if werr == nil {
				werr = nr.rs.wait(ctx, d)
			}
			if werr != nil {
				nr.record(&fl, ctx, werr, calls, 0)
				return zero, fl.out()
			}
		}
	}
}

// handBack hands a parked item that a drain recalled to its source's
// broker for the rest of its wait; it reports whether the broker took it.
// The retry was announced (OnRetry) when the item parked; the story is
// that of a hand-off of HandOffAfter.
func (nr *nodeRun) handBack(ctx context.Context, in any, tr *tracker, fl *failure, retry int, rest time.Duration, since time.Time) bool {
	h := tr.handOffAny()
	if h == nil || ctx.Err() != nil {
		return false
	}
	if since.IsZero() {
		since = nr.rs.p.cfg.clock.Now()
	}
	return nr.handOff(ctx, h, in, tr, fl, retry, rest, since)
}

// try makes one call of f under the node's breaker, if it has one, and
// classifies its error. called is false when the breaker refused (or ctx
// ended while paused) and f was not called. probe says the call was a
// probe of a half-open breaker. The breaker hears of its permit however
// the call ends: success, error, a panic in f or in a classifier rule, or
// the echo of a cancellation, which says nothing of the dependency.
//
// pause is when the item's pause under OpenPause ends: MaxPause after its
// first refusal in this cycle, however often the breaker closes and opens
// again meanwhile, so that one cycle's pausing, and its probes, stay
// within what Validate and Plan count. elapsedBy, when set, is when the
// item's MaxElapsed ends: a retry that paused does not start past it, and
// try returns errPastElapsed instead.
func try[In, R any](ctx context.Context, nr *nodeRun, f func(context.Context, In) (R, error), in In, tr *tracker, number int, pause *time.Time, elapsedBy time.Time, idle idleFunc) (r R, called, transient, probe bool, err error) {
	br := nr.spec.breaker
	classifier := nr.spec.res.ItemRetry.Classifier
	if br == nil {
		r, called, err = tracedCall(ctx, nr, f, in, tr, number)
		if err != nil && called {
			nr.echoed(ctx)
			if ctx.Err() == nil {
				transient, err = classify(ctx, classifier, err)
			}
		}
		return r, called, transient, false, err
	}
	permit, err := nr.permit(ctx, pause, elapsedBy, idle)
	if err != nil {
		return r, false, false, false, err
	}
	result := resilience.CallIgnored
	defer func() { br.Record(permit, result) }()
	r, called, err = tracedCall(ctx, nr, f, in, tr, number)
	if !called {
		// The tracer failed the run before the call.
		return r, false, false, permit.Probe(), err
	}
	if err != nil {
		nr.echoed(ctx)
	}
	switch {
	case err == nil:
		result = resilience.CallSuccess
	case ctx.Err() != nil:
	default:
		transient, err = classify(ctx, classifier, err)
		if transient {
			result = resilience.CallFailure
		}
	}
	return r, true, transient, permit.Probe(), err
}

// permit asks the node's breaker for leave to call. Under OpenPause a
// refusal waits, which stops the node reading, until the breaker lets a
// call through or the item's pause ends, MaxPause after its first refusal.
// A retry (elapsedBy set) waits no later than elapsedBy, when its item's
// MaxElapsed ends, and gets errPastElapsed, no permit, once the wait
// passed it: no retry starts past MaxElapsed, however long it paused.
func (nr *nodeRun) permit(ctx context.Context, pause *time.Time, elapsedBy time.Time, idle idleFunc) (resilience.Permit, error) {
	br, o := nr.spec.breaker, &nr.spec.res.CircuitBreaker
	p, err := br.Allow()
	if err != nil && o.WhenOpen == resilience.OpenPause {
		if pause.IsZero() {
			*pause = nr.rs.p.cfg.clock.Now().Add(o.MaxPause)
		}
		if err := idle.run(ctx); err != nil {
			return p, err
		}
		deadline := *pause
		if !elapsedBy.IsZero() && elapsedBy.Before(deadline) {
			deadline = elapsedBy
		}
		p, err = br.Wait(ctx, deadline)
		if !elapsedBy.IsZero() && ctx.Err() == nil {
			now := nr.rs.p.cfg.clock.Now()
			if err == nil && now.After(elapsedBy) {
				// Granted past it (the clock jumped over the wait's end).
				br.Record(p, resilience.CallIgnored)
				return resilience.Permit{}, errPastElapsed
			}
			if err != nil && !now.Before(elapsedBy) {
				return resilience.Permit{}, errPastElapsed
			}
		}
	}
	return p, err
}

// errPastElapsed is permit's answer when a retry waited for the breaker
// past its item's MaxElapsed.
var errPastElapsed = errors.New("sluice: the retry waited for the breaker past MaxElapsed")

// failed returns the failure of an item after its only call.
func (nr *nodeRun) failed(ctx context.Context, err error) *failure {
	fl := &failure{}
	nr.record(fl, ctx, err, 1, 0)
	return fl
}

// record adds a failed call to fl, the item's failure so far: calls counts
// the calls made, delay is the wait chosen before the next call (0 for
// none). When ctx is done, the failure is the echo of the cancellation and
// holds ctx's cause. The times and the history serve only the dead-letter
// envelope, so the clock is read only when the node dead-letters.
func (nr *nodeRun) record(fl *failure, ctx context.Context, err error, calls int, delay time.Duration) {
	fl.calls = calls
	if ctx.Err() != nil {
		fl.err = context.Cause(ctx)
		return
	}
	fl.err = err
	if !nr.spec.mayDeadLetter {
		return
	}
	now := nr.rs.p.cfg.clock.Now()
	if !fl.failedAt.IsZero() {
		now, fl.failedAt = fl.failedAt, time.Time{}
	}
	if fl.first.IsZero() {
		fl.first = now
	}
	fl.last = now
	if calls > len(fl.history)-fl.base {
		// The first call of an attempt that a node restart replayed is
		// that layer's; the calls after it are layer 1's retries.
		layer, retry := resilience.ItemRetry, calls-1
		if calls == 1 && fl.restarts > 0 {
			layer, retry = resilience.NodeRestart, fl.restarts
		}
		fl.history = append(fl.history, deadletter.Attempt{Time: now, Layer: layer, Retry: retry, Delay: delay, Err: errText(err)})
	}
}

// out returns a copy of fl that outlives the call that made it.
func (fl *failure) out() *failure {
	c := *fl
	return &c
}

// itemFailed applies the node's failure action to an item that layer 1
// gave up on. It returns nil when the item was skipped or dead-lettered,
// and the error that fails the node otherwise. ctx is the context of the
// node's current body: when it is done, the failure is only its echo and is
// neither counted nor dead-lettered. The action is the first failure rule's
// that matches the error, else OnItemFailure.
func (nr *nodeRun) itemFailed(ctx context.Context, item any, tr *tracker, fl *failure) error {
	if fl.handedOff {
		// The broker holds the item now, whatever the run does next.
		nr.spec.stats.handedOff.Add(nr.spec.items(item))
		tr.finish(node.HandedOff)
		return nil
	}
	nr.echoed(ctx)
	if ctx.Err() != nil {
		// Whatever the call returned, the run is stopping: the item is not
		// judged, and the run's end reports it Failed.
		return context.Cause(ctx)
	}
	n, rs := nr.spec, nr.rs
	// Failed is added once the action is done, after Skipped or
	// DeadLettered: a reader of the counters (Stats reads Failed first)
	// never sees an item on its way to the dead-letter sink as one that
	// failed the node.
	items := n.items(item)
	var nrs *notRestartable
	if errors.Is(fl.err, resilience.ErrCircuitOpen) || errors.As(fl.err, &nrs) {
		n.stats.failed.Add(items)
		return fl.err
	}
	action, err := nr.action(fl.err, fl.late)
	if err != nil {
		n.stats.failed.Add(items)
		return err
	}
	switch action {
	case resilience.Skip:
		n.stats.skipped.Add(items)
		n.stats.failed.Add(items)
		notify(rs, n, observer.Observer.OnDrop, observer.DropEvent{Event: rs.event(n), Key: keyOf(item, tr), Attempts: fl.total(), Err: fl.err})
		if tr != nil {
			tr.finish(outcomeOf(resilience.Skip))
		}
		return nil
	case resilience.DeadLetter:
		if resilience.IsBlameless(fl.err) && tr.takesBack() {
			// Not the item's fault (a busy key), and its source delivers
			// it again: a good item is not dead-lettered as a bad one.
			n.stats.failed.Add(items)
			tr.finish(node.Failed)
			return nil
		}
		key := keyOf(item, tr)
		retried, err := nr.deadLetter(ctx, item, tr, key, fl)
		if err != nil {
			n.stats.failed.Add(items)
			return err
		}
		if retried {
			// The sink gave the item back to its broker: no dead letter.
			n.stats.brokerRetries.Add(items)
		} else {
			n.stats.deadLettered.Add(items)
		}
		n.stats.failed.Add(items)
		notify(rs, n, observer.Observer.OnDeadLetter,
			observer.DeadLetterEvent{Event: rs.event(n), Key: key, OriginNode: n.name, Attempts: fl.total(), Err: fl.err, BrokerRetry: retried})
		if tr != nil {
			tr.finish(outcomeOf(resilience.DeadLetter))
		}
		return nil
	default:
		n.stats.failed.Add(items)
		if !resilience.IsBlameless(fl.err) {
			// A failure that is not the item's (a busy key, a
			// cancellation it did not cause) leaves it Failed, which a
			// broker source does not count against it. A retry the
			// shared budget refused is not excused: the item may have
			// spent the budget itself, and a poison message must still
			// reach its MaxDeliveries.
			nr.blame(tr)
			nr.tellRejected(tr, item, fl)
		}
		return fl.err
	}
}

// deadLetter writes item's envelope to the dead-letter sink, retrying with
// the sink's own backoff. When the sink still fails, the run fails with
// both the item's error and the sink's. retried says the sink gave the
// item back to its broker instead (deadletter.BrokerRetrier).
func (nr *nodeRun) deadLetter(ctx context.Context, item any, tr *tracker, key string, fl *failure) (retried bool, err error) {
	rs := nr.rs
	if rs.p.cfg.deadLetter == nil {
		// Build rejects the ways here it knows of; this names the
		// missing sink rather than failing on a nil one.
		return false, &notRestartable{fmt.Errorf("node %q: an item is to be dead-lettered, and the pipeline has no dead-letter sink (WithDeadLetter): %w", nr.spec.name, fl.err)}
	}
	env, err := nr.envelope(item, tr, fl)
	if env.CorrelationID == "" {
		env.CorrelationID = key
	}
	if err != nil {
		return false, err
	}
	o := rs.p.cfg.dlRetry
	for retry := 0; ; retry++ {
		// A dead letter is a write like a sink's: one running when the run
		// fails finishes, or the item would be dead-lettered twice.
		retried, err = nr.writeLetter(ctx, env)
		if err == nil {
			return retried, nil
		}
		if ctx.Err() != nil || retry >= o.maxRetries {
			break
		}
		d, perr := delay(o.backoff, retry+1, rs.p.cfg.rand)
		if perr != nil {
			return false, perr
		}
		if werr := rs.wait(ctx, d); werr != nil {
			return false, werr
		}
	}
	if ctx.Err() != nil {
		// Whatever the sink said, the run is stopping: not the sink's
		// failure, and the item is reported Failed at the run's end.
		return false, context.Cause(ctx)
	}
	return false, &notRestartable{errors.Join(fl.err, fmt.Errorf("pipeline: dead-letter sink failed: %w", err))}
}

// envelope returns the dead-letter envelope of item after fl; tr is the
// item's tracker, whose source position the envelope carries when the item
// derives from one item emitted with EmitAt.
func (nr *nodeRun) envelope(item any, tr *tracker, fl *failure) (deadletter.Envelope, error) {
	n, rs := nr.spec, nr.rs
	env := deadletter.Envelope{
		Item: item, ItemType: deadletter.TypeOf(item), Err: fl.err, ErrText: errText(fl.err),
		Pipeline: rs.p.name, RunID: rs.id, OriginNode: n.name, DecisionNode: n.name,
		Attempts: fl.total(), History: fl.history, FirstFailure: fl.first, LastFailure: fl.last,
	}
	if src, pos, ok := tr.origin(); ok {
		env.Source, env.Position = src, pos
	}
	if c, ok := item.(deadletter.Correlated); ok {
		id, err := correlationID(c)
		if err != nil {
			return env, err
		}
		env.CorrelationID = id
	}
	return env, nil
}

// writeLetter writes env to the run's dead-letter sink as a call of the
// node (see enterCall).
func (nr *nodeRun) writeLetter(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	defer nr.leaveCall()
	return safeWrite(nr.enterCall(ctx), nr.rs.p.cfg.deadLetter, env)
}

func safeWrite(ctx context.Context, s deadletter.Sink, env deadletter.Envelope) (retried bool, err error) {
	defer recovered(&err)
	if br, ok := s.(deadletter.BrokerRetrier); ok {
		return br.WriteOrRetry(ctx, env)
	}
	return false, s.Write(ctx, env)
}

// classify asks c whether err is transient for work under ctx and returns
// err. A panic in one of the user's rules returns that panic instead,
// which fails the node: it is a bug in the policy, not in the item.
func classify(ctx context.Context, c resilience.Classifier, in error) (transient bool, err error) {
	err = in
	defer recoveredPolicy("classifier rule", &err)
	return c.IsTransientContext(ctx, in), in
}

// retryDelay is the wait before retry n after err: the delay err asks for
// (resilience.RetryAfterOf), capped by b's MaxDelay when set, else b's
// curve. Both may run the user's code, under the panic guard.
func retryDelay(b resilience.Backoff, n int, r resilience.Rand, err error) (d time.Duration, perr error) {
	asked, ok, perr := retryAfterOf(err)
	switch {
	case perr != nil:
		return 0, perr
	case ok:
		if b.MaxDelay > 0 && asked > b.MaxDelay {
			asked = b.MaxDelay
		}
		return asked, nil
	case b.Kind == resilience.BackoffNone:
		return 0, nil
	}
	return delay(b, n, r)
}

func retryAfterOf(err error) (d time.Duration, ok bool, perr error) {
	defer recoveredPolicy("RetryAfter", &perr)
	d, ok = resilience.RetryAfterOf(err)
	return d, ok, nil
}

// delay returns the backoff's delay before retry n. A panic in a custom
// backoff fails the node.
func delay(b resilience.Backoff, n int, r resilience.Rand) (d time.Duration, err error) {
	defer recoveredPolicy("custom backoff", &err)
	return b.DelayForRand(n, r), nil
}

// keyOf returns the correlation key of item at its node: the key its
// source gave it (SourceKey), else its own CorrelationID
// (deadletter.Correlated), else "". It serves events, so a CorrelationID
// that panics gives "" here; the dead-letter envelope reports that panic.
func keyOf[T any](item T, tr *tracker) string {
	if k := tr.keyOf(); k != "" {
		return k
	}
	if c, ok := any(item).(deadletter.Correlated); ok {
		if id, err := correlationID(c); err == nil {
			return id
		}
	}
	return ""
}

// correlationID asks an item for its correlation id; a panic fails the node.
func correlationID(c deadletter.Correlated) (id string, err error) {
	defer recoveredPolicy("CorrelationID", &err)
	return c.CorrelationID(), nil
}

// errText is err's text. The error is the user's: an Error method that
// panics gives a text that says so, on the way to a dead letter, instead of
// crashing the process.
func errText(err error) (text string) {
	defer func() {
		if v := recover(); v != nil {
			text = fmt.Sprintf("(the error's Error method panicked: %v)", v)
		}
	}()
	return err.Error()
}

// action returns the failure action of err: the first of the node's
// failure rules that matches it, else OnItemFailure, or DeadLetter for an
// item an event-time Aggregate found late (a late item is no failed call).
// A rule's Match is the user's code: a panic in it fails the node, naming
// the rule.
func (nr *nodeRun) action(err error, late bool) (a resilience.FailureAction, perr error) {
	o := &nr.spec.res
	for i, r := range o.FailureRules {
		matched, perr := matchRule(r.Match, err, i)
		if perr != nil {
			return 0, &notRestartable{perr}
		}
		if matched {
			return r.Action, nil
		}
	}
	if late {
		return resilience.DeadLetter, nil
	}
	return o.OnItemFailure, nil
}

// mayDeadLetter reports whether some failure may be dead-lettered under o:
// by OnItemFailure or by a failure rule.
func mayDeadLetter(o resilience.Options) bool {
	if o.OnItemFailure == resilience.DeadLetter {
		return true
	}
	for _, r := range o.FailureRules {
		if r.Action == resilience.DeadLetter {
			return true
		}
	}
	return false
}

func matchRule(match func(error) bool, err error, i int) (matched bool, perr error) {
	defer recoveredPolicy(fmt.Sprintf("failure rule %d", i), &perr)
	return match(err), nil
}
