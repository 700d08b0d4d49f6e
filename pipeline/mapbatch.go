package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// ErrBatchResults is matched by the error of an item whose MapBatch call
// returned no result or no error for it: f returned slices of another
// length than its input. It is permanent: a bug in f, not in the item.
var ErrBatchResults = errors.New("pipeline: MapBatch function returned the wrong number of results")

// MapBatch adds a transform that calls f once on a slice of up to size
// items of in, and hands on one result per item, in input order. A slice
// is called when it holds size items, when linger has passed on the
// pipeline's clock since its first item (linger 0 waits for a full
// slice), and when the input ends.
//
// f returns, for ins[i], outs[i] and errs[i]; ins is a new slice each
// call, which f may keep or return (with [ReuseSlice], f may return it
// but not keep it). Each item keeps its own
// fate: an item whose error is nil is done and its result handed on; each
// other item goes through layer 1 alone, as if its own call had failed
// with errs[i] when the batch call returned: it is retried by calling f on
// a slice of that one item, and dead-lettered, skipped or failed alone,
// with its own key, tracker and counts. Its MaxElapsed, first failure,
// first wait and a hand-off's Since count from the batch call's failure.
// An item handed off to its source comes back as an ordinary item, which
// may be gathered into a slice with others. A nil errs says that every item succeeded. Slices of another
// length than ins fail the items left without a result or an error with
// an error matching [ErrBatchResults] (every item of the slice when a
// slice is too long), and a panic in f fails every item of its slice with
// the [*resilience.PanicError]: both are permanent.
//
// A batch call asks the node's circuit breaker for one permit and reports
// it once: a failure when any item's error is transient, else ignored
// (success when no item failed); when it is refused, each item of the
// slice goes through layer 1 alone. Under
// AttemptTimeout a batch call has the same deadline as a single call. A
// tracer (observer.WithTracer) sees the calls layer 1 makes on one item,
// not the batch calls.
// After a node restart (layer 2), the item that failed the node is retried
// alone, and the items of its slice after it are settled with what the
// batch call returned for them, without calling f again.
//
// MapBatch takes Buffer, NodeResilience and ReuseSlice; Build refuses Parallel,
// Unordered, Keyed, Fallback, RateLimit and MaxParked, naming the node: one slice is
// called at a time. The node's kind is [KindTransform], and its counts are
// items, not slices.
func MapBatch[In, Out any](b *Builder, name string, in Stream[In], size int, linger time.Duration, f func(context.Context, []In) ([]Out, []error), opts ...NodeOption) Stream[Out] {
	s := b.add(name, KindTransform, opts, in.s)
	s.callsOnSlices = true
	passBatches[In, Out](s)
	s.validate = batchChecks(s, "MapBatch", f == nil, size, linger)
	s.newEdge = edgeOf[In]
	s.newRunner = func(nr *nodeRun) runner {
		return newBatchMap(nr, f, size, linger, newWriter(outEdges[Out](nr), nr.spec))
	}
	return Stream[Out]{b.output(s)}
}

// batchChecks returns the Build checks of a node that calls a function
// (what) on slices: MapBatch or ForEachBatch.
func batchChecks(s *spec, what string, fnil bool, size int, linger time.Duration) func() []error {
	return func() []error {
		var errs []error
		if fnil {
			errs = append(errs, fmt.Errorf("%s function is nil", what))
		}
		if size < 1 {
			errs = append(errs, fmt.Errorf("%s size %d: must be at least 1", what, size))
		}
		if linger < 0 {
			errs = append(errs, fmt.Errorf("%s linger %s: must not be negative", what, linger))
		}
		c := s.cfg
		for _, o := range []struct {
			set  bool
			name string
		}{
			{c.parallelSet && c.parallel != 1, fmt.Sprintf("Parallel(%d)", c.parallel)},
			{c.unordered, "Unordered"},
			{c.keyed != nil, "Keyed"},
			{c.fallback != nil, "Fallback"},
			{c.limited, "RateLimit"},
			{c.maxParkedSet, fmt.Sprintf("MaxParked(%d)", c.maxParked)},
		} {
			if o.set {
				errs = append(errs, fmt.Errorf("%s: %s calls one slice at a time and takes only Buffer, NodeResilience and ReuseSlice", o.name, what))
			}
		}
		return errs
	}
}

// newBatchMap returns the runner of a node that calls f on slices of up
// to size items and hands each item's result to w.
func newBatchMap[In, Out any](nr *nodeRun, f func(context.Context, []In) ([]Out, []error), size int, linger time.Duration, w *writer[Out]) *batchMap[In, Out] {
	n := nr.spec
	m := &batchMap[In, Out]{
		nr: nr, f: f, size: size, linger: linger,
		in: newReader(nr.rs.edges[n.id].(edge[In]), n), w: w,
		g: newGathering[In](size), reuse: n.cfg.reuseSlice,
	}
	m.in.idle = m.w.flush
	m.one = func(ctx context.Context, v In) (Out, error) {
		outs, errs := m.callOne(ctx, v)
		return outs[0], errs[0]
	}
	if d := n.res.ItemRetry.AttemptTimeout; d > 0 {
		m.one = withAttemptTimeout(m.one, d, nr.rs.p.cfg.clock)
	}
	if n.res.RetryBudget != nil {
		m.calls = &n.stats.calls
	}
	return m
}

// A batchMap is the runtime of a MapBatch node: it gathers items like a
// Batch, calls the user's function on the slice, and settles each item on
// its own.
type batchMap[In, Out any] struct {
	nr     *nodeRun
	f      func(context.Context, []In) ([]Out, []error)
	one    func(context.Context, In) (Out, error) // one item's call, for layer 1
	in     *reader[In]
	w      *writer[Out]
	size   int
	linger time.Duration

	g gathering[In]
	// resume is what body takes up after a restart: the item that failed
	// the node, with what its attempts left in resumeFailed, and the items
	// of its slice after it, with their batch call's results.
	resume       *called[In, Out]
	resumeFailed *failure
	took         bool
	completed    int64
	// written: f's success took effect (a ForEachBatch wrote the item),
	// so an item it succeeded on is delivered even if the node fails.
	written bool
	// calls counts first calls for a retry budget, nil without one.
	calls *atomic.Int64
	// reuse: ReuseSlice, f's slice is gathered into again once settled.
	reuse bool
	// orig holds the values of the slice being called, as gathered.
	orig []In
}

func (m *batchMap[In, Out]) open(context.Context) error  { return nil }
func (m *batchMap[In, Out]) close(context.Context) error { return nil }
func (m *batchMap[In, Out]) consumed() bool              { return m.took }
func (m *batchMap[In, Out]) progress() int64             { return m.completed }
func (m *batchMap[In, Out]) restarting()                 {}
func (m *batchMap[In, Out]) reopens() bool               { return false }
func (m *batchMap[In, Out]) countsCalls()                {}

func (m *batchMap[In, Out]) finish(ctx context.Context) error { return m.w.close(ctx) }

func (m *batchMap[In, Out]) body(ctx context.Context) error {
	defer m.in.n.flush()
	defer m.w.out.flush()
	if c := m.resume; c != nil {
		prior := m.resumeFailed
		m.resume, m.resumeFailed = nil, nil
		c.tr(0).unblame()
		if err := m.alone(ctx, c, 0, prior); err != nil {
			return err
		}
		// The batch call's results for the items after it are in hand: f
		// is not called on them again (a bulk write would write twice).
		if err := m.settle(ctx, c, 1); err != nil {
			return err
		}
	}
	return gather(ctx, m.in, m.nr.rs.p.cfg.clock, m.linger, m.size, &m.g, &m.took, m.flush)
}

// flush calls f on the items gathered and settles them. f gets the
// slice the values were gathered into (or a copy, when they fill less
// than half of it), which is f's from then on: the next items are
// gathered into a new one, or, under ReuseSlice, into the same one once
// its items are settled (what a restart keeps of them is copied, see
// rest).
func (m *batchMap[In, Out]) flush(ctx context.Context) error {
	if len(m.g.vals) == 0 {
		return nil
	}
	var (
		vals []In
		trs  []*tracker
	)
	if m.reuse {
		vals, trs = m.g.lend()
	} else {
		vals, trs = m.g.take()
	}
	// f may change its slice in place: each item keeps its own value,
	// for its retries, its dead letter and a restart, in a copy that
	// stays the node's (one copy of the slice, not one per item).
	m.orig = append(m.orig[:0], vals...)
	c, err := m.batch(ctx, vals, m.orig, trs)
	if err == nil {
		err = m.settle(ctx, c, 0)
	}
	m.g.clear(m.orig)
	if m.reuse {
		m.g.reset(vals)
	}
	return err
}

// ReuseSlice lets a [MapBatch] or a [ForEachBatch] call its function on
// the node's own slice for its batch calls, which saves the allocation of
// a new slice per call (and its share of the garbage collector): the
// slice f gets is lent for the call, and f must not keep it, nor a part
// of it, once it returns. The node's slice grows while the slices it
// gathers get larger, up to the node's size, and is then the same for
// every batch call; a retry of a single item calls f on a slice of its
// own. f may still return the slice (a MapBatch that works in place): the
// results are handed on before the slice is used again. Without
// ReuseSlice each call gets a new slice, which f may keep. Build refuses
// ReuseSlice on any other node, naming it.
func ReuseSlice() NodeOption {
	return func(c *nodeConfig) { c.reuseSlice = true }
}

// A called is a slice of items and what its batch call returned, kept
// until each item is settled, across a node restart.
type called[In, Out any] struct {
	vals []In
	trs  []*tracker // by position; nil when no item is tracked
	outs []Out      // nil when the breaker refused the call
	errs []error    // nil when every item succeeded or the call was refused
	// refused: the breaker refused the call, f was not called.
	refused bool
	// at is when the call failed: the failed items' first failure.
	at time.Time
	// probe: the call was a half-open breaker's probe.
	probe bool
}

// tr returns the tracker of item j.
func (c *called[In, Out]) tr(j int) *tracker {
	if c.trs == nil {
		return nil
	}
	return c.trs[j]
}

// rest returns c from item j on, copied: f may keep or reuse the slices
// of its call, and a later call of f (a retry of one item) must not
// change what is kept for a restart.
func (c *called[In, Out]) rest(j int) *called[In, Out] {
	r := *c
	r.vals = slices.Clone(c.vals[j:])
	if c.trs != nil {
		r.trs = slices.Clone(c.trs[j:])
	}
	if c.outs != nil {
		r.outs = slices.Clone(c.outs[j:])
	}
	if c.errs != nil {
		r.errs = slices.Clone(c.errs[j:])
	}
	return &r
}

// batch makes the batch call of f on items under the node's breaker,
// which hears of it once: a success, a failure when any item's error is
// transient, else ignored, whatever the order of the items.
// vals is the slice f is called on, orig the items' values, which f
// does not see, and trs their trackers.
func (m *batchMap[In, Out]) batch(ctx context.Context, vals, orig []In, trs []*tracker) (*called[In, Out], error) {
	if ctx.Err() != nil {
		// No call once the run stops.
		return nil, context.Cause(ctx)
	}
	c := &called[In, Out]{vals: orig, trs: trs}
	br := m.nr.spec.breaker
	var permit resilience.Permit
	if br != nil {
		var err error
		if permit, err = br.Allow(); err != nil {
			c.refused = true
			return c, nil
		}
	}
	c.outs, c.errs = m.call(ctx, vals)
	c.at = m.nr.rs.p.cfg.clock.Now()
	if c.errs != nil && !slices.ContainsFunc(c.errs, func(e error) bool { return e != nil }) {
		c.errs = nil
	}
	if br != nil {
		br.Record(permit, m.breakerResult(ctx, c.errs))
		c.probe = permit.Probe()
	}
	return c, nil
}

// breakerResult is what a batch call that returned errs reports to the
// breaker: one call, failed when any of its items failed transiently.
func (m *batchMap[In, Out]) breakerResult(ctx context.Context, errs []error) resilience.CallResult {
	switch {
	case errs == nil:
		return resilience.CallSuccess
	case ctx.Err() != nil:
		// The echo of a cancellation says nothing of the dependency.
		return resilience.CallIgnored
	}
	cl := m.nr.spec.res.ItemRetry.Classifier
	for _, err := range errs {
		if err == nil {
			continue
		}
		if transient, _ := classify(ctx, cl, err); transient {
			return resilience.CallFailure
		}
	}
	return resilience.CallIgnored
}

// settle takes the items of c from item j on through layer 1 and their
// failure action, in order: an item that succeeded in the batch call is
// handed on, each other goes alone. When an item fails the node, it and
// the items after it are kept, with their results, for the restart.
func (m *batchMap[In, Out]) settle(ctx context.Context, c *called[In, Out], j int) error {
	for ; j < len(c.vals); j++ {
		if k := m.untracked(c, j); k > j {
			// Untracked items that succeeded are handed on in one go.
			n, err := m.w.pushVals(ctx, c.outs[j:k])
			m.completed += int64(n)
			if err != nil {
				return err
			}
			if j = k; j == len(c.vals) {
				return nil
			}
		}
		if c.refused || (c.errs != nil && c.errs[j] != nil) {
			if err := m.alone(ctx, c, j, nil); err != nil {
				return err
			}
			continue
		}
		m.completed++
		c.tr(j).reshape()
		if err := m.w.push(ctx, envelope[Out]{val: c.outs[j], tr: c.tr(j)}); err != nil {
			return err
		}
	}
	return nil
}

// untracked returns the end of the items of c from j on that succeeded
// and that nobody tracks.
func (m *batchMap[In, Out]) untracked(c *called[In, Out], j int) int {
	switch {
	case c.refused:
		return j
	case c.trs == nil && c.errs == nil:
		return len(c.vals)
	}
	for ; j < len(c.vals); j++ {
		if c.tr(j) != nil || (c.errs != nil && c.errs[j] != nil) {
			break
		}
	}
	return j
}

// alone takes item j of c through layer 1 by itself. prior, when not nil,
// is what its attempts left before a node restart; else its first call is
// the batch call, failed at c.at (or not made, when the breaker refused
// it): its MaxElapsed, first failure, first wait and a hand-off's Since
// count from that failure, not from when its turn comes. When the item
// fails the node, it and the items after it are kept for a restart.
func (m *batchMap[In, Out]) alone(ctx context.Context, c *called[In, Out], j int, prior *failure) error {
	val, tr := c.vals[j], c.tr(j)
	nr := m.nr
	idle := func(ctx context.Context) error {
		m.in.n.flush()
		return m.w.flush(ctx)
	}
	var (
		first error
		from  *retryState
	)
	if prior == nil && !c.refused {
		first = c.errs[j]
		from = &retryState{fl: failure{first: c.at, failedAt: c.at}, started: c.at, failedAt: c.at, probe: c.probe}
		if r := tr.resume(nr.spec.name); r.Retry > 0 {
			// A delivery after a hand-off continues the retries it had.
			from.retry, from.started = r.Retry, r.Since
		}
	}
	if first == nil && prior == nil && m.calls != nil {
		m.calls.Add(1)
	}
	r, fl := itemRetryFrom(ctx, nr, m.one, val, tr, prior, first, nil, idle, from, false)
	if fl == nil {
		m.completed++
		tr.reshape()
		return m.w.push(ctx, envelope[Out]{val: r, tr: tr})
	}
	if err := nr.itemFailed(ctx, val, tr, fl); err != nil {
		rest := c.rest(j)
		if m.written {
			rest = m.settleWritten(ctx, rest)
		}
		m.resume, m.resumeFailed = rest, fl.again()
		return err
	}
	m.completed++
	return nil
}

// settleWritten settles as delivered the items of c after its first that
// f wrote (their error is nil), when the first failed its node: for a
// ForEachBatch the write took place, and an item left for a restart that
// does not come would end Failed, and a broker would deliver it again. It
// returns c without them: the first item and those still to retry.
func (m *batchMap[In, Out]) settleWritten(ctx context.Context, c *called[In, Out]) *called[In, Out] {
	if c.refused || c.errs == nil {
		return c
	}
	kept := *c
	kept.vals, kept.outs, kept.errs = c.vals[:1], c.outs[:1], c.errs[:1]
	if c.trs != nil {
		kept.trs = c.trs[:1]
	}
	for i := 1; i < len(c.vals); i++ {
		if c.errs[i] == nil {
			c.tr(i).reshape()
			if err := m.w.push(ctx, envelope[Out]{val: c.outs[i], tr: c.tr(i)}); err == nil {
				m.completed++
				continue
			}
		}
		kept.vals = append(kept.vals, c.vals[i])
		if c.trs != nil {
			kept.trs = append(kept.trs, c.trs[i])
		}
		kept.outs = append(kept.outs, c.outs[i])
		kept.errs = append(kept.errs, c.errs[i])
	}
	m.w.tryFlush()
	return &kept
}

// call makes one batch call of f on vals, under the panic guard and the
// node's AttemptTimeout, and returns one result and one error per item.
// vals is a new slice each call: f may keep it, or return it as its
// results.
func (m *batchMap[In, Out]) call(ctx context.Context, vals []In) ([]Out, []error) {
	if m.calls != nil {
		m.calls.Add(int64(len(vals)))
	}
	return m.guarded(ctx, vals)
}

// callOne calls f on a slice of v alone, for layer 1's retries; the
// results are checked as a batch call's are.
func (m *batchMap[In, Out]) callOne(ctx context.Context, v In) ([]Out, []error) {
	outs, errs, perr := m.invoke(ctx, []In{v})
	switch {
	case perr != nil:
		var zero Out
		return []Out{zero}, []error{perr}
	case errs == nil:
		return outs, []error{nil}
	}
	return outs, errs
}

// guarded is a batch call of f on vals as a call of the node: under the
// node's AttemptTimeout, a failed item's error after the deadline becomes
// an AttemptTimeoutError.
func (m *batchMap[In, Out]) guarded(ctx context.Context, vals []In) ([]Out, []error) {
	nr := m.nr
	call := nr.enterCall(ctx)
	defer nr.leaveCall()
	d := nr.spec.res.ItemRetry.AttemptTimeout
	var deadline time.Time
	if d > 0 {
		clock := nr.rs.p.cfg.clock
		deadline = clock.Now().Add(d)
		var cancel context.CancelFunc
		call, cancel = withDeadlineOn(call, clock, deadline)
		defer cancel()
	}
	outs, errs, perr := m.invoke(call, vals)
	if errs != nil || perr != nil {
		nr.echoed(ctx)
	}
	if perr != nil {
		outs, errs = make([]Out, len(vals)), make([]error, len(vals))
		for i := range errs {
			errs[i] = perr
		}
		return outs, errs
	}
	if d > 0 && errs != nil && ctx.Err() == nil && !nr.rs.p.cfg.clock.Now().Before(deadline) {
		for i, err := range errs {
			if err != nil {
				errs[i] = &resilience.AttemptTimeoutError{Timeout: d, Err: err}
			}
		}
	}
	return outs, errs
}

// invoke calls f under the panic guard and checks what it returned: it
// returns len(vals) results and errors (nil errors when every item
// succeeded), an item with neither failing with ErrBatchResults, or perr
// when f panicked.
func (m *batchMap[In, Out]) invoke(ctx context.Context, vals []In) (outs []Out, errs []error, perr error) {
	outs, errs, perr = m.safe(ctx, vals)
	if perr != nil {
		return nil, nil, perr
	}
	n := len(vals)
	if len(outs) == n && (errs == nil || len(errs) == n) {
		return outs, errs, nil // a nil errs: every item succeeded
	}
	bad := resilience.MarkPermanent(fmt.Errorf("%w: %d results and %d errors for %d items", ErrBatchResults, len(outs), len(errs), n))
	fixed, fixedErrs := make([]Out, n), make([]error, n)
	for i := range n {
		switch {
		case len(outs) > n || len(errs) > n:
			// Too long: which result is whose is unknown.
			fixedErrs[i] = bad
		case errs != nil && i >= len(errs):
			fixedErrs[i] = bad
		case errs != nil && errs[i] != nil:
			fixedErrs[i] = errs[i]
		case i >= len(outs):
			fixedErrs[i] = bad
		default:
			fixed[i] = outs[i]
		}
	}
	return fixed, fixedErrs, nil
}

func (m *batchMap[In, Out]) safe(ctx context.Context, vals []In) (outs []Out, errs []error, err error) {
	defer recovered(&err)
	outs, errs = m.f(ctx, vals)
	return outs, errs, nil
}
