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
// call, which f may keep or return. Each item keeps its own
// fate: an item whose error is nil is done and its result handed on; each
// other item goes through layer 1 alone, as if its own call had failed
// with errs[i]: it is retried by calling f on a slice of that one item,
// and dead-lettered, skipped or failed alone, with its own key, tracker
// and counts. A nil errs says that every item succeeded. Slices of another
// length than ins fail the items left without a result or an error with
// an error matching [ErrBatchResults] (every item of the slice when a
// slice is too long), and a panic in f fails every item of its slice with
// the [*resilience.PanicError]: both are permanent.
//
// A batch call asks the node's circuit breaker for one permit; when it is
// refused, each item of the slice goes through layer 1 alone. Under
// AttemptTimeout a batch call has the same deadline as a single call. A
// tracer (observer.WithTracer) sees the calls layer 1 makes on one item,
// not the batch calls.
// After a node restart (layer 2), the item that failed the node is retried
// alone, and the items of its slice not yet handed on are called again.
//
// MapBatch takes Buffer and NodeResilience; Build refuses Parallel,
// Unordered, Keyed, Fallback and RateLimit, naming the node: one slice is
// called at a time. The node's kind is [KindTransform], and its counts are
// items, not slices.
func MapBatch[In, Out any](b *Builder, name string, in Stream[In], size int, linger time.Duration, f func(context.Context, []In) ([]Out, []error), opts ...NodeOption) Stream[Out] {
	s := b.add(name, KindTransform, opts, in.s)
	passBatches[In, Out](s)
	s.validate = func() []error {
		var errs []error
		if f == nil {
			errs = append(errs, errors.New("MapBatch function is nil"))
		}
		if size < 1 {
			errs = append(errs, fmt.Errorf("MapBatch size %d: must be at least 1", size))
		}
		if linger < 0 {
			errs = append(errs, fmt.Errorf("MapBatch linger %s: must not be negative", linger))
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
		} {
			if o.set {
				errs = append(errs, fmt.Errorf("%s: MapBatch calls one slice at a time and takes only Buffer and NodeResilience", o.name))
			}
		}
		return errs
	}
	s.newEdge = edgeOf[In]
	s.newRunner = func(nr *nodeRun) runner {
		n := nr.spec
		m := &batchMap[In, Out]{
			nr: nr, f: f, size: size, linger: linger,
			in: newReader(nr.rs.edges[n.id].(edge[In]), n), w: newWriter(outEdges[Out](nr), n),
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
	return Stream[Out]{b.output(s)}
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

	pending []envelope[In]
	// resume is what body takes up after a restart: the item that failed
	// the node, with what its attempts left in resumeFailed, and the items
	// of its slice after it.
	resume       []envelope[In]
	resumeFailed *failure
	took         bool
	completed    int64
	// calls counts first calls for a retry budget, nil without one.
	calls *atomic.Int64
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
	if items := m.resume; items != nil {
		prior := m.resumeFailed
		m.resume, m.resumeFailed = nil, nil
		if err := m.settle(ctx, items, prior); err != nil {
			return err
		}
	}
	return gather(ctx, m.in, m.nr.rs.p.cfg.clock, m.linger, m.size, &m.pending, &m.took, m.flush)
}

// flush settles the items gathered.
func (m *batchMap[In, Out]) flush(ctx context.Context) error {
	if len(m.pending) == 0 {
		return nil
	}
	err := m.settle(ctx, m.pending, nil)
	clear(m.pending)
	m.pending = m.pending[:0]
	return err
}

// settle calls f on items and takes each through layer 1 and its failure
// action. prior, when not nil, is what the first item's attempts left
// before a node restart: that item is retried alone first. When an item
// fails the node, it and the items after it are kept for the restart.
func (m *batchMap[In, Out]) settle(ctx context.Context, items []envelope[In], prior *failure) (err error) {
	if prior != nil {
		items[0].tr.unblame()
		if err := m.alone(ctx, items, 0, prior, nil, nil); err != nil {
			return err
		}
		items = items[1:]
	}
	if len(items) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		// No call once the run stops.
		return context.Cause(ctx)
	}
	br := m.nr.spec.breaker
	var (
		held    *resilience.Permit
		permit  resilience.Permit
		refused bool
	)
	if br != nil {
		var perr error
		if permit, perr = br.Allow(); perr != nil {
			refused = true
		} else {
			held = &permit
			defer func() {
				// A permit no item took over: the node stopped first.
				if held != nil {
					br.Record(*held, resilience.CallIgnored)
				}
			}()
		}
	}
	var outs []Out
	var errs []error
	if !refused {
		outs, errs = m.call(ctx, items)
		if errs != nil && !slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
			errs = nil
		}
		if held != nil && errs == nil {
			br.Record(*held, resilience.CallSuccess)
			held = nil
		}
	}
	for j := range items {
		if refused || (errs != nil && errs[j] != nil) {
			var first error
			if !refused {
				first = errs[j]
			}
			// The first failed item reports the batch call's permit,
			// as its own call's.
			h := held
			held = nil
			if err := m.alone(ctx, items, j, nil, first, h); err != nil {
				return err
			}
			continue
		}
		m.completed++
		if err := m.w.push(ctx, envelope[Out]{val: outs[j], tr: items[j].tr}); err != nil {
			return err
		}
	}
	return nil
}

// alone takes item j of items through layer 1 by itself: first is the
// error of its batch call, nil when it was not called (the breaker
// refused the batch), and held the batch call's permit when the item
// reports it. When the item fails the node, it and the items after it are
// kept for a restart.
func (m *batchMap[In, Out]) alone(ctx context.Context, items []envelope[In], j int, prior *failure, first error, held *resilience.Permit) error {
	it := items[j]
	nr := m.nr
	idle := func(ctx context.Context) error {
		m.in.n.flush()
		return m.w.flush(ctx)
	}
	var (
		r  Out
		fl *failure
	)
	if first == nil && prior == nil && m.calls != nil {
		m.calls.Add(1)
	}
	r, fl = itemRetry(ctx, nr, m.one, it.val, it.tr, prior, first, held, idle)
	if fl == nil {
		m.completed++
		return m.w.push(ctx, envelope[Out]{val: r, tr: it.tr})
	}
	if err := nr.itemFailed(ctx, it.val, it.tr, fl); err != nil {
		m.resume, m.resumeFailed = slices.Clone(items[j:]), fl.again()
		return err
	}
	m.completed++
	return nil
}

// call makes one batch call of f on items, under the panic guard and the
// node's AttemptTimeout, and returns one result and one error per item.
func (m *batchMap[In, Out]) call(ctx context.Context, items []envelope[In]) ([]Out, []error) {
	// A new slice each call: f may keep it, or return it as its results.
	vals := make([]In, len(items))
	for i, it := range items {
		vals[i] = it.val
	}
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
