package resilience

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/clocktimer"
)

// OpenAction says what a node does while its breaker refuses calls.
type OpenAction int

const (
	// OpenFail fails the node with a [*CircuitOpenError], whatever
	// OnItemFailure says. It is the zero value.
	OpenFail OpenAction = iota
	// OpenPause stops the node reading, which is backpressure upstream,
	// until the breaker lets a probe through, for at most MaxPause.
	OpenPause
)

// String returns the action's name in lower case.
func (a OpenAction) String() string {
	switch a {
	case OpenFail:
		return "fail"
	case OpenPause:
		return "pause"
	default:
		return fmt.Sprintf("OpenAction(%d)", int(a))
	}
}

// CircuitBreakerOptions configure the breaker that guards every item
// attempt of a node. Only transient failures count. [DefaultCircuitBreaker]
// gives the documented defaults with Enabled false; setting Enabled turns
// them on.
type CircuitBreakerOptions struct {
	// Enabled turns the breaker on; false, the zero value, leaves the node
	// without one. A pipeline's Build refuses a breaker field a user set
	// while Enabled is false, since the setting would do nothing.
	Enabled bool
	// ConsecutiveFailures trips the breaker after this many transient
	// failures in a row; 0 turns this condition off.
	ConsecutiveFailures int
	// FailureRate trips the breaker when the share of transient failures
	// among the calls of the last Window reaches it, once at least
	// MinimumCalls were made; 0 turns this condition off.
	FailureRate float64
	// MinimumCalls is the fewest calls in Window before FailureRate can
	// trip the breaker; it must be above 0 when FailureRate is set (the
	// default is 20).
	MinimumCalls int
	// Window is the rolling time over which FailureRate is measured; it
	// must be above 0 when FailureRate is set (the default is 30 s).
	Window time.Duration
	// OpenDuration is how long the breaker refuses calls before it lets
	// probes through; it must be above 0 (the default is 30 s).
	OpenDuration time.Duration
	// HalfOpenProbes is how many probe calls may run at once while half
	// open; it must be above 0 (the default is 1). A failed probe opens
	// the breaker again.
	HalfOpenProbes int
	// ProbeSuccesses is how many probes must succeed to close the breaker
	// again; it must be above 0 (the default is 1).
	ProbeSuccesses int
	// WhenOpen is what the node does while the breaker refuses calls; the
	// zero value is OpenFail.
	WhenOpen OpenAction
	// MaxPause bounds one pause under OpenPause; it must not be shorter than
	// OpenDuration, or the pause could never end in a probe (the default
	// is 5 min). Under OpenFail it is not used.
	MaxPause time.Duration
}

// DefaultCircuitBreaker returns the default breaker settings, not enabled:
// trip after 5 consecutive transient failures, stay open 30 s, close after
// 1 successful probe, fail the node while open. The failure-rate condition
// is off; setting FailureRate uses a minimum of 20 calls over 30 s.
func DefaultCircuitBreaker() CircuitBreakerOptions {
	return CircuitBreakerOptions{
		ConsecutiveFailures: 5,
		MinimumCalls:        20,
		Window:              30 * time.Second,
		OpenDuration:        30 * time.Second,
		HalfOpenProbes:      1,
		ProbeSuccesses:      1,
		WhenOpen:            OpenFail,
		MaxPause:            5 * time.Minute,
	}
}

// PauseProbes returns the most probes one item can make while it pauses
// under OpenPause: one each OpenDuration until MaxPause has passed, the
// first at OpenDuration at the latest.
func (o CircuitBreakerOptions) PauseProbes() int {
	if !o.Enabled || o.WhenOpen != OpenPause || o.OpenDuration <= 0 {
		return 0
	}
	return int(o.MaxPause/o.OpenDuration) + 1
}

// Validate reports every problem of o, joined. Disabled options are valid.
func (o CircuitBreakerOptions) Validate() error {
	errs := newOptionErrors()
	o.validate(errs)
	return errs.err()
}

func (o CircuitBreakerOptions) validate(errs optionErrors) {
	if !o.Enabled {
		return
	}
	if o.ConsecutiveFailures < 0 {
		errs.add("ConsecutiveFailures", o.ConsecutiveFailures, "must not be negative (0 turns it off)")
	}
	if math.IsNaN(o.FailureRate) || o.FailureRate < 0 || o.FailureRate > 1 {
		errs.add("FailureRate", o.FailureRate, "must be in (0, 1], or 0 to turn it off")
	}
	if o.ConsecutiveFailures <= 0 && !(o.FailureRate > 0) {
		errs.add("ConsecutiveFailures", o.ConsecutiveFailures,
			"an enabled breaker needs a trip condition: ConsecutiveFailures or FailureRate above 0")
	}
	if o.FailureRate > 0 {
		if o.MinimumCalls <= 0 {
			errs.add("MinimumCalls", o.MinimumCalls, "must be above 0 when FailureRate is set")
		}
		if o.Window <= 0 {
			errs.add("Window", o.Window, "must be above 0 when FailureRate is set")
		}
	}
	if o.OpenDuration <= 0 {
		errs.add("OpenDuration", o.OpenDuration, "must be above 0")
	}
	if o.HalfOpenProbes <= 0 {
		errs.add("HalfOpenProbes", o.HalfOpenProbes, "must be above 0")
	}
	if o.ProbeSuccesses <= 0 {
		errs.add("ProbeSuccesses", o.ProbeSuccesses, "must be above 0")
	}
	switch o.WhenOpen {
	case OpenFail:
	case OpenPause:
		if o.MaxPause < o.OpenDuration {
			errs.add("MaxPause", o.MaxPause,
				fmt.Sprintf("must not be shorter than OpenDuration (%s): the pause would end before a probe", o.OpenDuration))
		}
	default:
		errs.add("WhenOpen", o.WhenOpen, "unknown open action")
	}
}

// CircuitState is the state of a [Breaker].
type CircuitState int

const (
	// CircuitClosed lets every call through and counts failures.
	CircuitClosed CircuitState = iota
	// CircuitOpen refuses every call until OpenDuration has passed.
	CircuitOpen
	// CircuitHalfOpen lets up to HalfOpenProbes probe calls through.
	CircuitHalfOpen
)

// String returns the state's name in lower case.
func (s CircuitState) String() string {
	switch s {
	case CircuitClosed:
		return "closed"
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half_open"
	default:
		return fmt.Sprintf("CircuitState(%d)", int(s))
	}
}

// A Transition is one change of a breaker's state. Generation counts the
// transitions of the breaker; it orders transitions reported concurrently.
type Transition struct {
	// From and To are the states before and after the change.
	From, To CircuitState
	// Generation is the count of the breaker's transitions, this one
	// included.
	Generation uint64
	// Time is when the change happened, on the breaker's clock.
	Time time.Time
}

// CallResult is what a guarded call reports to its breaker.
type CallResult int

const (
	// CallSuccess is a call that worked.
	CallSuccess CallResult = iota
	// CallFailure is a call that failed transiently; it counts towards
	// tripping.
	CallFailure
	// CallIgnored is a call whose outcome says nothing of the dependency's
	// health, such as a permanent error or a cancellation; it only frees the
	// permit.
	CallIgnored
)

// A Permit is the breaker's leave for one call. Report its result with
// [Breaker.Record] exactly once, however the call ends: a probe permit that
// is never reported keeps its probe slot taken.
type Permit struct {
	generation uint64
	probe      bool
}

// Probe reports whether the permit is for a probe of a half-open breaker.
func (p Permit) Probe() bool { return p.probe }

// breakerBuckets is how many slices the rolling window is cut into.
const breakerBuckets = 10

// A Breaker is a circuit breaker: a state machine driven by the results of
// the calls it guards and by an injected clock. It starts no goroutine and
// no timer: open turns half-open at the first permit asked for after
// OpenDuration. Each transition starts a new generation, and the result of
// a permit from an older generation is ignored, so a slow call that began
// before the breaker opened cannot close it.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	name         string
	opts         CircuitBreakerOptions
	clock        clockwork.Clock
	onTransition func(Transition)

	mu    sync.Mutex
	state CircuitState
	// seen is generation<<2 | state, both readable at once without the
	// lock.
	seen        atomic.Uint64
	generation  uint64
	consecutive atomic.Int64 // written under mu, but reset by a success without it
	openedAt    time.Time
	inFlight    int // probes running while half open
	successes   int // probes that succeeded while half open
	buckets     [breakerBuckets]bucket
	changed     chan struct{}
}

type bucket struct {
	epoch           int64
	calls, failures int
}

// NewBreaker returns a closed Breaker for opts, which should be valid. name
// is the node it guards and appears in its errors. onTransition, if not nil,
// is called after every transition, outside the breaker's lock, from the
// goroutine whose call caused it.
func NewBreaker(name string, opts CircuitBreakerOptions, clock clockwork.Clock, onTransition func(Transition)) *Breaker {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Breaker{name: name, opts: opts, clock: clock, onTransition: onTransition, changed: make(chan struct{})}
}

// State returns the current state, as of the breaker's clock: an open
// breaker whose OpenDuration has passed reports half-open, since its next
// Allow lets a probe through, although the transition (and its
// onTransition) waits for that Allow. A closed breaker is read without
// taking a lock.
func (b *Breaker) State() CircuitState {
	st := CircuitState(b.seen.Load() & 3)
	if st != CircuitOpen {
		return st
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == CircuitOpen && !b.clock.Now().Before(b.openedAt.Add(b.opts.OpenDuration)) {
		return CircuitHalfOpen
	}
	return b.state
}

// changedCh returns a channel that is closed at the next transition or
// when a half-open probe slot is freed.
func (b *Breaker) changedCh() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Wait asks leave for one call as Allow does and, while the breaker
// refuses, waits and asks again: until the next transition or freed probe
// slot, or until the refusal's Until on the breaker's clock, whichever
// comes first. Past deadline it stops waiting and returns the last
// refusal, a [*CircuitOpenError]; a zero deadline never waits. When ctx is
// done first it returns ctx's cause. Wait is how a caller pauses through
// an outage instead of failing; it starts no goroutine.
func (b *Breaker) Wait(ctx context.Context, deadline time.Time) (Permit, error) {
	for {
		changed := b.changedCh()
		// Read before Allow: a refusal's Until is then after now, even if
		// the clock moves while Allow runs.
		now := b.clock.Now()
		p, err := b.Allow()
		if err == nil {
			return p, nil
		}
		if !now.Before(deadline) {
			return p, err
		}
		if ctx.Err() != nil {
			return Permit{}, context.Cause(ctx)
		}
		until := deadline
		if coe, ok := err.(*CircuitOpenError); ok && coe.Until.After(now) && coe.Until.Before(deadline) {
			until = coe.Until
		}
		// Armed at the instant, not for the time left at now: the clock
		// may have moved since (while Allow ran, or while arming).
		t := clocktimer.At(b.clock, until)
		select {
		case <-t.Chan():
		case <-changed:
		case <-ctx.Done():
			t.Stop()
			return Permit{}, context.Cause(ctx)
		}
		t.Stop()
	}
}

// Allow asks leave for one call. It returns a [*CircuitOpenError] while the
// breaker is open, or half open with every probe slot taken; its Until says
// when an open breaker lets probes through.
//
// A closed breaker grants a permit without a lock or a clock read: the
// state and the generation are read atomically, and a permit that raced
// with a transition belongs to an older generation, whose result is
// ignored.
func (b *Breaker) Allow() (Permit, error) {
	if v := b.seen.Load(); CircuitState(v&3) == CircuitClosed {
		return Permit{generation: v >> 2}, nil
	}
	return b.allow()
}

func (b *Breaker) allow() (Permit, error) {
	b.mu.Lock()
	var (
		now time.Time
		ts  []Transition
	)
	if b.state != CircuitClosed {
		now = b.clock.Now()
		if b.state == CircuitOpen && !now.Before(b.openedAt.Add(b.opts.OpenDuration)) {
			ts = append(ts, b.transition(CircuitHalfOpen, now))
		}
	}
	var (
		p   Permit
		err error
	)
	switch b.state {
	case CircuitClosed:
		p = Permit{generation: b.generation}
	case CircuitOpen:
		err = &CircuitOpenError{Node: b.name, Until: b.openedAt.Add(b.opts.OpenDuration)}
	case CircuitHalfOpen:
		if b.inFlight < b.opts.HalfOpenProbes {
			b.inFlight++
			p = Permit{generation: b.generation, probe: true}
		} else {
			err = &CircuitOpenError{Node: b.name, Until: now}
		}
	}
	b.mu.Unlock()
	b.report(ts)
	return p, err
}

// Record reports the result of the call p allowed. A permit from an older
// generation is ignored.
//
// A closed breaker that trips on consecutive failures alone counts a
// success without a lock: a permit that is not a probe and belongs to the
// current generation was granted while closed, and the breaker is closed
// still. A failure, or a success counted in the failure-rate window, takes
// the lock.
func (b *Breaker) Record(p Permit, r CallResult) {
	if !p.probe && p.generation == b.seen.Load()>>2 {
		switch {
		case r == CallIgnored:
			return
		case r == CallSuccess && b.opts.FailureRate <= 0:
			if b.consecutive.Load() != 0 {
				b.consecutive.Store(0)
			}
			return
		}
	}
	b.record(p, r)
}

func (b *Breaker) record(p Permit, r CallResult) {
	b.mu.Lock()
	if p.generation != b.generation {
		b.mu.Unlock()
		return
	}
	var ts []Transition
	switch b.state {
	case CircuitClosed:
		ts = b.recordClosed(r)
	case CircuitHalfOpen:
		if !p.probe {
			break
		}
		b.inFlight--
		switch r {
		case CallSuccess:
			b.successes++
			if b.successes >= b.opts.ProbeSuccesses {
				ts = append(ts, b.transition(CircuitClosed, b.clock.Now()))
			}
		case CallFailure:
			ts = append(ts, b.transition(CircuitOpen, b.clock.Now()))
		}
		if len(ts) == 0 {
			b.wake()
		}
	}
	b.mu.Unlock()
	b.report(ts)
}

// recordClosed counts a result while closed. It reads the clock only for
// the failure-rate window and for a transition: a breaker that trips on
// consecutive failures alone counts a success without it.
func (b *Breaker) recordClosed(r CallResult) []Transition {
	var now time.Time
	if b.opts.FailureRate > 0 && r != CallIgnored {
		now = b.clock.Now()
	}
	switch r {
	case CallSuccess:
		b.consecutive.Store(0)
		b.count(now, false)
	case CallFailure:
		consecutive := b.consecutive.Add(1)
		calls, failures := b.count(now, true)
		tripConsecutive := b.opts.ConsecutiveFailures > 0 && consecutive >= int64(b.opts.ConsecutiveFailures)
		tripRate := b.opts.FailureRate > 0 && calls >= b.opts.MinimumCalls &&
			float64(failures) >= b.opts.FailureRate*float64(calls)
		if tripConsecutive || tripRate {
			if now.IsZero() {
				now = b.clock.Now()
			}
			return []Transition{b.transition(CircuitOpen, now)}
		}
	}
	return nil
}

// count adds one call to the rolling window and returns the window's totals.
func (b *Breaker) count(now time.Time, failed bool) (calls, failures int) {
	if b.opts.FailureRate <= 0 {
		return 0, 0
	}
	width := max(int64(b.opts.Window)/breakerBuckets, 1)
	epoch := now.UnixNano() / width
	cur := &b.buckets[((epoch%breakerBuckets)+breakerBuckets)%breakerBuckets] // epochs before 1970 are negative
	if cur.epoch != epoch {
		*cur = bucket{epoch: epoch}
	}
	cur.calls++
	if failed {
		cur.failures++
	}
	for _, bk := range b.buckets {
		if bk.epoch > epoch-breakerBuckets && bk.epoch <= epoch {
			calls += bk.calls
			failures += bk.failures
		}
	}
	return calls, failures
}

// transition moves to state to; b.mu is held.
func (b *Breaker) transition(to CircuitState, now time.Time) Transition {
	t := Transition{From: b.state, To: to, Time: now}
	b.state = to
	b.generation++
	b.seen.Store(b.generation<<2 | uint64(to))
	t.Generation = b.generation
	b.inFlight, b.successes = 0, 0
	switch to {
	case CircuitOpen:
		b.openedAt = now
	case CircuitClosed:
		b.consecutive.Store(0)
		b.buckets = [breakerBuckets]bucket{}
	}
	b.wake()
	return t
}

// wake closes the changed channel and makes a new one; b.mu is held.
func (b *Breaker) wake() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *Breaker) report(ts []Transition) {
	if b.onTransition == nil {
		return
	}
	for _, t := range ts {
		b.onTransition(t)
	}
}
