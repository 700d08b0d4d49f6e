package resilience

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// ErrBudgetExhausted is in the error chain of an item that was not retried
// because the retry budget it draws on was spent.
var ErrBudgetExhausted = errors.New("resilience: retry budget exhausted")

// BudgetOptions configure a [Budget].
type BudgetOptions struct {
	// Ratio is how many retries the budget allows per first attempt, over
	// Window: 0.1 allows one retry for every ten items. At least 0; 0,
	// the zero value, allows only MinPerSecond.
	Ratio float64
	// MinPerSecond retries per second are allowed on top of Ratio, so that
	// a trickle of items can still retry. At least 0; the zero value adds
	// none.
	MinPerSecond float64
	// Window is the time over which first attempts and retries are
	// counted; 0, the zero value, takes 10 s.
	Window time.Duration
	// Clock is the budget's clock; nil, the zero value, takes the real
	// one. Give the
	// pipeline's fake clock in tests.
	Clock clockwork.Clock
}

const budgetBuckets = 10

// A Budget bounds the retries of the nodes that share it (through
// [Options].RetryBudget), across nodes and runs: over the last Window, at
// most Ratio × the items they took in, plus MinPerSecond × Window. When a
// dependency fails for everyone, retries then add at most Ratio to its load
// instead of multiplying it by every layer's retries. A Budget is safe for
// concurrent use.
//
// It costs nothing per item: the nodes' input counts, which the engine
// keeps anyway, are read only when a retry asks for leave.
type Budget struct {
	opts   BudgetOptions
	bad    []OptionError // what Validate reports, Field relative to the budget
	origin time.Time     // bucket epochs count from here

	mu      sync.Mutex
	sources map[*atomic.Int64]int64 // tracked input counters and their base
	settled int64                   // items counted from counters no longer tracked
	samples []budgetSample          // total items taken in, over time
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

// Track counts the items that in counts as first attempts, from its value
// now, until the returned function is called. The engine tracks each
// node's input counter while the node runs.
func (b *Budget) Track(in *atomic.Int64) (untrack func()) {
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
// clock that goes back still gives a bucket.
func (b *Budget) epoch(now time.Time) int64 {
	d, w := int64(now.Sub(b.origin)), int64(b.opts.Window/budgetBuckets)
	e := d / w
	if d%w != 0 && d < 0 {
		e--
	}
	return e
}

// firstsLocked returns the items taken in over the last Window, as the
// samples tell: the total of the tracked counters is sampled when a node
// starts and when a retry asks for leave (at most one sample per
// Window/10), and the items counted are those since the oldest sample
// within the window. That errs low, never high: items taken in before the
// oldest sample in the window are not lent to the retries of a later
// outage, so after a quiet spell the budget starts from MinPerSecond and
// catches up within Window/10.
func (b *Budget) firstsLocked(now time.Time) int64 {
	total := b.totalLocked()
	cut := now.Add(-b.opts.Window)
	i := 0
	for i < len(b.samples) && !b.samples[i].at.After(cut) {
		i++
	}
	b.samples = b.samples[i:]
	var n int64
	if len(b.samples) > 0 {
		n = total - b.samples[0].total
	}
	b.sampleLocked(now, total)
	return n
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
