package resilience

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/hook"
)

// ErrBudgetExhausted is in the error chain of an item that was not retried
// because the retry budget it draws on was spent.
var ErrBudgetExhausted = errors.New("resilience: retry budget exhausted")

// BudgetOptions configure a [Budget].
type BudgetOptions struct {
	// Ratio is how many retries the budget allows per first attempt, over
	// Window: 0.1 allows one retry for every ten first calls the nodes
	// made. At least 0; 0, the zero value, allows only MinPerSecond.
	Ratio float64
	// MinPerSecond retries per second are allowed on top of Ratio, so that
	// a trickle of items can still retry. At least 0; the zero value adds
	// none.
	MinPerSecond float64
	// Window is the time over which first attempts and retries are
	// counted; 0, the zero value, takes 10 s.
	Window time.Duration
	// Clock is the budget's clock; nil, the zero value, takes the real
	// one. Give the pipeline's fake clock in tests.
	Clock clockwork.Clock
}

const budgetBuckets = 10

// A Budget bounds the retries of the nodes that share it (through
// [Options].RetryBudget), across nodes and runs: over the last Window, at
// most Ratio × the first calls they made (an item's first call, counted
// when it is made, not when the item arrives), plus MinPerSecond × Window.
// When a dependency fails for everyone, retries then add at most Ratio to
// its load instead of multiplying it by every layer's retries; a node that
// holds a backlog after its input ended or drained (a Keyed node, a large
// Buffer) keeps the allowance its calls earn. A Budget is safe for
// concurrent use.
//
// It costs at most one atomic add per item of a node that draws on it,
// nothing to other nodes: the counts are read only when a retry asks for
// leave.
type Budget struct {
	opts   BudgetOptions
	bad    []OptionError // what Validate reports, Field relative to the budget
	origin time.Time     // bucket epochs count from here

	mu      sync.Mutex
	sources map[*atomic.Int64]int64 // tracked counters and their base
	settled int64                   // first attempts counted from counters no longer tracked
	samples []budgetSample          // total first attempts, over time
	retries [budgetBuckets]budgetBucket
	refused int64
}

type budgetSample struct {
	at    time.Time
	total int64
}

type budgetBucket struct {
	epoch int64
	n     int64
}

// NewBudget returns a Budget for o. Options that are not valid are
// reported by the Validate of every [Options] that uses the budget, so by
// pipeline.Build.
func NewBudget(o BudgetOptions) *Budget {
	if o.Window == 0 {
		o.Window = 10 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	b := &Budget{opts: o, sources: map[*atomic.Int64]int64{}, origin: o.Clock.Now()}
	if o.Ratio < 0 || math.IsNaN(o.Ratio) || math.IsInf(o.Ratio, 0) {
		b.bad = append(b.bad, OptionError{Field: "Ratio", Value: o.Ratio, Reason: "must be a finite number, at least 0"})
	}
	if o.MinPerSecond < 0 || math.IsNaN(o.MinPerSecond) || math.IsInf(o.MinPerSecond, 0) {
		b.bad = append(b.bad, OptionError{Field: "MinPerSecond", Value: o.MinPerSecond, Reason: "must be a finite number, at least 0"})
	}
	if o.Window < budgetBuckets {
		b.bad = append(b.bad, OptionError{Field: "Window", Value: o.Window, Reason: fmt.Sprintf("must be at least %dns", budgetBuckets)})
	}
	return b
}

func init() {
	hook.TrackBudget = func(b any, in *atomic.Int64) func() { return b.(*Budget).track(in) }
}

// track counts what in counts as first attempts, from its value now,
// until the returned function is called. The engine tracks, while a node
// runs, its count of first calls, which it adds to as it makes them (a
// Join or an Aggregate, which calls the user's function as it takes each
// item in, gives its input count); it reaches track through
// [hook.TrackBudget], as it is plumbing, not API.
func (b *Budget) track(in *atomic.Int64) (untrack func()) {
	now := b.opts.Clock.Now()
	b.mu.Lock()
	b.sampleLocked(now, b.totalLocked())
	b.sources[in] = in.Load()
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if base, ok := b.sources[in]; ok {
			b.settled += in.Load() - base
			delete(b.sources, in)
		}
	}
}

// Withdraw asks leave for one retry; false when the budget is spent. A
// retry that is allowed is counted.
func (b *Budget) Withdraw() bool {
	now := b.opts.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	firsts := b.firstsLocked(now)
	epoch := b.epoch(now)
	var retries int64
	for _, bk := range b.retries {
		if bk.epoch > epoch-budgetBuckets && bk.epoch <= epoch {
			retries += bk.n
		}
	}
	allowed := b.opts.Ratio*float64(firsts) + b.opts.MinPerSecond*b.opts.Window.Seconds()
	if float64(retries+1) > allowed {
		b.refused++
		return false
	}
	cur := &b.retries[((epoch%budgetBuckets)+budgetBuckets)%budgetBuckets]
	if cur.epoch != epoch {
		*cur = budgetBucket{epoch: epoch}
	}
	cur.n++
	return true
}

// Refused counts the retries the budget refused.
func (b *Budget) Refused() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// epoch numbers the bucket of now, counted from the budget's creation so
// that any clock works (one before 1970, a zero time), flooring so that a
// clock that goes back still gives a bucket. A Window too small to
// split (an invalid option, which Validate reports) takes buckets of 1ns,
// so that a Budget used without validation does not divide by zero.
func (b *Budget) epoch(now time.Time) int64 {
	d, w := int64(now.Sub(b.origin)), max(int64(b.opts.Window/budgetBuckets), 1)
	e := d / w
	if d%w != 0 && d < 0 {
		e--
	}
	return e
}

// firstsLocked returns the first attempts made over the last Window, as
// the samples tell: the total of the tracked counters is sampled when a
// node starts and when a retry asks for leave (at most one sample per
// Window/10). The samples kept are the newest one at or before the
// window's start, the base, and those after it; the count at the window's
// start is read between the base and the next sample (or now), as if the
// attempts between them were spread evenly. While retries ask for leave
// often, that is exact to within Window/10; after a spell without retries
// longer than Window, the attempts of that spell count pro rata: a node
// that calls steadily and fails rarely keeps its allowance, and a burst
// long ago lends only its share.
func (b *Budget) firstsLocked(now time.Time) int64 {
	total := b.totalLocked()
	cut := now.Add(-b.opts.Window)
	i := 0
	for i+1 < len(b.samples) && !b.samples[i+1].at.After(cut) {
		i++
	}
	b.samples = b.samples[i:]
	var n int64
	switch {
	case len(b.samples) == 0:
	case b.samples[0].at.After(cut):
		// Counting began within the window: every attempt since counts.
		n = total - b.samples[0].total
	default:
		base, next := b.samples[0], budgetSample{at: now, total: total}
		if len(b.samples) > 1 {
			next = b.samples[1]
		}
		atCut := base.total
		if span := next.at.Sub(base.at); span > 0 {
			share := float64(cut.Sub(base.at)) / float64(span)
			atCut += int64(math.Ceil(share * float64(next.total-base.total)))
		}
		n = total - atCut
	}
	b.sampleLocked(now, total)
	return max(n, 0)
}

func (b *Budget) totalLocked() int64 {
	total := b.settled
	for in, base := range b.sources {
		total += in.Load() - base
	}
	return total
}

// sampleLocked records total at now when the newest sample is at least
// Window/10 old.
func (b *Budget) sampleLocked(now time.Time, total int64) {
	if n := len(b.samples); n == 0 || now.Sub(b.samples[n-1].at) >= b.opts.Window/budgetBuckets {
		b.samples = append(b.samples, budgetSample{at: now, total: total})
	}
}

// validate files the budget's problems under errs, each at its field
// (RetryBudget.Ratio, say).
func (b *Budget) validate(errs optionErrors) {
	for _, e := range b.bad {
		errs.add(e.Field, e.Value, e.Reason)
	}
}
