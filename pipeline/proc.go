package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice/resilience"
)

// A proc is the runtime of a node that calls a function on each input item:
// transforms, sinks, filters, flat maps, unbatch and merge. call is the
// user's work, retried by layer 1; deliver hands its result downstream (or
// marks the item delivered, for a sink). With Parallel(n) the calls run on
// n workers; ordered output goes through a collector that hands results
// over in input order.
type proc[In, R, Out any] struct {
	nr      *nodeRun
	user    any // the user's node value, for Open, Close and Flush
	call    func(context.Context, In) (R, error)
	deliver deliverFunc[In, R, Out]
	in      *inbox[In]
	writers []*writer[Out] // one, or one per worker when unordered; none for a sink
	sink    bool
	// loop is the node kind's own loop over a run of items (see run),
	// unless wrapped: call then does more than the user's function (an
	// attempt deadline, a rate-limit token), and the loop calls it.
	loop    loopFunc[In, Out]
	wrapped bool
	cur     int // the item loop is at, for the panic guard
	// rescue is the node's Fallback, nil without one.
	rescue func(context.Context, In, error) (R, error)
	// gate holds the breaker permit of the item at cur while its call
	// runs in the fast loop; layer 1 reports it when the call fails.
	gate gate
	// resume is what runs takes up after a restart, and resumeFailed what
	// its first item's attempts left; completed counts the items runs
	// completed in this run.
	resume       []envelope[In]
	resumeFailed *failure
	completed    int64
	// tick counts the items the run loop started, across runs: it looks
	// at ctx before every stopEvery-th.
	tick uint
	// calls is the node's count of first calls when it draws on a retry
	// budget, nil otherwise: see countsCalls.
	calls *atomic.Int64
}

// countsCalls says that the node counts its first calls as it makes them,
// which a retry budget then counts as its first attempts.
func (p *proc[In, R, Out]) countsCalls() {}

// A loopFunc calls the node's function on items[*j:], advancing *j, and
// hands the results over through w (a sink counts them in done). It stops
// at the first item whose call fails and returns that call's error as
// itemErr, or returns err when handing over fails or ctx is done, which
// ends the node. It looks at ctx before every stopEvery-th item, counted
// in *tick across runs. g is the node's breaker, nil without one: an item
// it refuses ends the loop with errRefused.
type loopFunc[In, Out any] func(ctx context.Context, w *writer[Out], done *tally, items []envelope[In], j *int, tick *uint, g *gate) (itemErr, err error)

// A gate asks a node's breaker before each call of the fast loop and holds
// the permit while the call runs, so that layer 1 can take it over when
// the call fails and release can report it when the node ends first.
type gate struct {
	br      *resilience.Breaker
	held    resilience.Permit
	holding bool
}

// enter asks for a permit; false when the breaker refuses the call.
func (g *gate) enter() bool {
	permit, err := g.br.Allow()
	if err != nil {
		return false
	}
	g.held, g.holding = permit, true
	return true
}

// passed records that the call made under the held permit succeeded.
func (g *gate) passed() {
	g.holding = false
	g.br.Record(g.held, resilience.CallSuccess)
}

// A deliverFunc hands the result r of item env downstream through w, or,
// for a sink, marks the item delivered and counts it in done.
type deliverFunc[In, R, Out any] func(ctx context.Context, w *writer[Out], done *tally, env envelope[In], r R) error

func newProc[In, R, Out any](nr *nodeRun, user any, call func(context.Context, In) (R, error), deliver deliverFunc[In, R, Out]) *proc[In, R, Out] {
	n := nr.spec
	p := &proc[In, R, Out]{nr: nr, user: user, call: call, deliver: deliver, sink: n.output == nil}
	p.gate.br = n.breaker
	if n.res.RetryBudget != nil && callsUser(n) {
		p.calls = &n.stats.calls
	}
	if d := n.res.ItemRetry.AttemptTimeout; d > 0 {
		p.call = withAttemptTimeout(p.call, d, nr.rs.p.cfg.clock)
		p.wrapped = true
	}
	if n.limiter != nil {
		// The token is taken before the call's own deadline starts.
		p.call = withRateLimit(p.call, n.limiter)
		p.wrapped = true
	}
	if nr.rs.tracer != nil && callsUser(n) {
		// Every call goes through traced: no fast loop.
		p.wrapped = true
	}
	r := newReader(nr.rs.edges[n.id].(edge[In]), n)
	// Only parallel workers need a replay window: a single worker's
	// checkpoint is the item it is at (see runs). A Keyed node's workers
	// are parallel workers, even when there is one.
	window := 0
	if n.res.NodeRestart.MaxRestarts > 0 && (n.cfg.parallel > 1 || n.cfg.keyed != nil) {
		window = n.res.NodeRestart.MaxReplayWindow
	}
	p.in = newInbox(r, window)
	if !p.sink {
		writers := 1
		if n.cfg.parallel > 1 && (n.cfg.unordered || n.cfg.keyed != nil) {
			writers = n.cfg.parallel
		}
		edges := outEdges[Out](nr)
		for range writers {
			p.writers = append(p.writers, newWriter(edges, n))
		}
		if n.cfg.parallel == 1 && n.cfg.keyed == nil {
			// The reader's goroutine owns the writer: it hands over what
			// is gathered before it waits for input.
			r.idle = p.writers[0].flush
		}
	}
	return p
}

func (p *proc[In, R, Out]) open(ctx context.Context) error  { return openNode(ctx, p.user) }
func (p *proc[In, R, Out]) close(ctx context.Context) error { return closeNode(ctx, p.user) }
func (p *proc[In, R, Out]) consumed() bool                  { return p.in.took }
func (p *proc[In, R, Out]) progress() int64                 { return p.in.progress() + p.completed }
func (p *proc[In, R, Out]) restarting()                     { p.in.rewind() }
func (p *proc[In, R, Out]) reopens() bool                   { return hasOpen(p.user) }

// A restartFlusher is a runner whose node must be flushed before a node
// restart closes it (a sink that buffers).
type restartFlusher interface {
	flushForRestart(ctx context.Context) error
}

// flushForRestart flushes a sink before a node restart closes it.
func (p *proc[In, R, Out]) flushForRestart(ctx context.Context) error {
	if !p.sink {
		return nil
	}
	return flushNode(ctx, p.user)
}

func (p *proc[In, R, Out]) finish(ctx context.Context) error {
	if p.sink {
		return flushNode(ctx, p.user)
	}
	for _, w := range p.writers {
		if err := w.close(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p *proc[In, R, Out]) writer(i int) *writer[Out] {
	if p.sink {
		return nil
	}
	return p.writers[i]
}

func (p *proc[In, R, Out]) body(ctx context.Context) error {
	// Whatever way the body ends, its counts are published, so that a
	// failed or cancelled run reports what it did.
	defer p.flushCounts()
	switch {
	case p.nr.spec.cfg.keyed != nil:
		return p.keyed(ctx)
	case p.nr.spec.cfg.parallel > 1 && (p.nr.spec.cfg.unordered || p.sink):
		return p.unordered(ctx)
	case p.nr.spec.cfg.parallel > 1:
		return p.ordered(ctx)
	default:
		return p.runs(ctx)
	}
}

func (p *proc[In, R, Out]) flushCounts() {
	p.in.r.n.flush()
	for _, w := range p.writers {
		w.out.flush()
	}
}

// stopping returns why a parallel worker must call no more of the user's
// code: its group (ctx) or the run is stopping. The run's own context is
// done first when the caller cancels, a moment before its cancellation
// reaches the workers' contexts.
func (p *proc[In, R, Out]) stopping(ctx context.Context) error {
	for _, c := range [...]context.Context{ctx, p.nr.rs.ctx} {
		if c.Err() != nil {
			return context.Cause(c)
		}
	}
	return nil
}

// idle returns what a goroutine of the node runs before layer 1 waits: it
// hands over what w gathered and publishes the counts it keeps, the
// input's too when it owns the reader.
func (p *proc[In, R, Out]) idle(w *writer[Out], done *tally, reader bool) idleFunc {
	return func(ctx context.Context) error {
		done.flush()
		if reader {
			p.in.r.n.flush()
		}
		if w == nil {
			return nil
		}
		return w.flush(ctx)
	}
}

// fallback tries the node's Fallback on an item that layer 1 gave up on:
// a result it returns is the item's result, with no failure. It is not
// tried on the echo of a cancellation, nor on a failure that is not the
// item's (a panic in policy code, the repeat cap); an error it returns
// joins the item's, for the failure action.
func (p *proc[In, R, Out]) fallback(ctx context.Context, in In, fl *failure) (R, *failure) {
	var zero R
	var nrs *notRestartable
	if p.rescue == nil || fl.handedOff || ctx.Err() != nil || errors.As(fl.err, &nrs) {
		return zero, fl
	}
	r, err := rescueCall(p.nr, ctx, p.rescue, in, fl.err)
	if ctx.Err() != nil {
		return zero, fl
	}
	if err == nil {
		p.nr.spec.stats.fallbacks.Add(p.nr.spec.items(in))
		return r, nil
	}
	fl.err = errors.Join(fl.err, fmt.Errorf("fallback: %w", err))
	return zero, fl
}

func rescueCall[In, R any](nr *nodeRun, ctx context.Context, f func(context.Context, In, error) (R, error), in In, cause error) (r R, err error) {
	defer recovered(&err)
	ctx = nr.enterCall(ctx)
	defer nr.leaveCall()
	return f(ctx, in, cause)
}

// handle runs one item through layer 1 and its failure action; it reports
// whether there is a result to deliver. With parks, an item whose retry
// waits is not done: handle returns its loop state, for the caller to
// park it; from is such a state, when the item's wait ended.
func (p *proc[In, R, Out]) handle(ctx context.Context, env envelope[In], t ticket, idle idleFunc, from *retryState, parks bool) (R, bool, *retryState, error) {
	if t.prior != nil {
		env.tr.unblame()
	} else if p.calls != nil && from == nil {
		// A parallel worker's first call of the item, counted as it is
		// made: one atomic add, only for a node with a retry budget.
		p.calls.Add(1)
	}
	r, fl := attempt(ctx, p.nr, p.call, env.val, env.tr, t.prior, idle, from, parks)
	if fl != nil && fl.park != nil {
		if from != nil {
			fl.park.slot = from.slot
		}
		return r, false, fl.park, nil
	}
	if fl != nil {
		r, fl = p.fallback(ctx, env.val, fl)
	}
	if fl == nil {
		return r, true, nil, nil
	}
	if err := p.nr.itemFailed(ctx, env.val, env.tr, fl); err != nil {
		p.in.spent(t, fl)
		return r, false, nil, err
	}
	p.in.ack(t)
	return r, false, nil, nil
}

// runs is the loop of a node with one worker: it takes whole runs of input
// and calls the node's function on each item under one panic guard,
// entering layer 1's retry loop only for an item whose first call failed
// or was refused by the breaker. The loop over a run looks at ctx before
// every stopEvery-th item it starts, counted across runs (tick), so that
// short runs (per-item hand-over, a batch handed over early) are covered
// too.
//
// Under node restart it needs no replay window: it processes one item at
// a time and hands it over before the next, so its checkpoint is the item
// it was at. When an item fails the node, the rest of the run, that item
// first, is kept in resume (it still lies in the reader's batch, which the
// reader is not asked to replace meanwhile), and the restarted body takes
// it up before it reads on.
func (p *proc[In, R, Out]) runs(ctx context.Context) error {
	w := p.writer(0)
	done := tally{dst: &p.nr.spec.stats.out}
	defer done.flush()
	idle := p.idle(w, &done, true)
	r := p.in.r
	// Before the reader waits for input it publishes the node's counts,
	// not only its own: Stats read while the node waits show every item
	// it handled.
	r.idle = idle
	for {
		items, prior := p.resume, p.resumeFailed
		if items != nil {
			p.resume, p.resumeFailed = nil, nil
		} else {
			var ok bool
			var err error
			if items, ok, err = r.nextRun(ctx); err != nil || !ok {
				return err
			}
			p.in.took = true
		}
		if err := p.runItems(ctx, w, &done, items, prior, idle); err != nil {
			return err
		}
	}
}

// runItems processes one run of items; prior is what its first item's
// attempts left before a restart, which then goes straight to layer 1 to
// count its calls against the repeat cap and carry on its history.
func (p *proc[In, R, Out]) runItems(ctx context.Context, w *writer[Out], done *tally, items []envelope[In], prior *failure, idle idleFunc) error {
	i := 0
	if prior != nil {
		items[0].tr.unblame()
		if err := p.retry(ctx, w, done, items, 0, prior, errRefused, idle); err != nil {
			return err
		}
		p.completed++
		i = 1
	}
	for i < len(items) {
		ferr, err := p.run(ctx, w, done, items, i)
		p.countCalls(i, ferr, err)
		if err != nil {
			p.release()
			return err
		}
		j := p.cur
		if ferr == nil {
			p.completed += int64(len(items) - i)
			return nil
		}
		p.completed += int64(j - i)
		if err := p.retry(ctx, w, done, items, j, nil, ferr, idle); err != nil {
			return err
		}
		p.completed++
		i = j + 1
	}
	return nil
}

// countCalls counts, for a node with a retry budget, the first calls the
// fast loop made on a run from item i: those of the items before p.cur,
// and that of the item at p.cur when its call failed (not when the
// breaker refused it). One add a run, before the failed item asks the
// budget for its retry.
func (p *proc[In, R, Out]) countCalls(i int, ferr, err error) {
	if p.calls == nil {
		return
	}
	n := p.cur - i
	if err == nil && ferr != nil && ferr != errRefused {
		n++
	}
	if n > 0 {
		p.calls.Add(int64(n))
	}
}

// retry takes item j of a run through layer 1 after its first call failed
// with ferr (errRefused: it was not called); prior is what its attempts
// left before a restart. When the item fails the node, the rest of the run is kept for
// the restart.
func (p *proc[In, R, Out]) retry(ctx context.Context, w *writer[Out], done *tally, items []envelope[In], j int, prior *failure, ferr error, idle idleFunc) error {
	it := items[j]
	var held *resilience.Permit
	if p.gate.holding {
		held, p.gate.holding = &p.gate.held, false
	}
	if ferr == errRefused {
		ferr = nil // not called: layer 1 calls it
	}
	r, fl := itemRetry(ctx, p.nr, p.call, it.val, it.tr, prior, ferr, held, idle)
	if fl != nil {
		r, fl = p.fallback(ctx, it.val, fl)
	}
	if fl == nil {
		return p.deliver(ctx, w, done, it, r)
	}
	if err := p.nr.itemFailed(ctx, it.val, it.tr, fl); err != nil {
		// The node fails at this item: a restart takes it up again.
		p.resume, p.resumeFailed = items[j:], fl.again()
		return err
	}
	return nil
}

// run processes items[i:] until one fails, leaving p.cur at the item it
// stopped at: it returns the error of that item's call (a panic included),
// or errRefused when the node's breaker refused the call, or an error that
// ends the node.
func (p *proc[In, R, Out]) run(ctx context.Context, w *writer[Out], done *tally, items []envelope[In], i int) (itemErr, err error) {
	p.cur = i
	defer recovered(&itemErr)
	var g *gate
	if p.gate.br != nil {
		g = &p.gate
	}
	if p.loop != nil && !p.wrapped {
		return p.loop(ctx, w, done, items, &p.cur, &p.tick, g)
	}
	for ; p.cur < len(items); p.cur++ {
		if p.tick++; p.tick%stopEvery == 0 && ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		it := &items[p.cur]
		if g != nil && !g.enter() {
			return errRefused, nil
		}
		var (
			r    R
			cerr error
		)
		if !p.wrapped || p.nr.rs.tracer == nil {
			r, cerr = userCall(p.nr, ctx, p.call, it.val)
		} else {
			r, cerr = traced(ctx, p.nr, p.call, it.val, it.tr, 1)
		}
		if cerr != nil {
			return cerr, nil
		}
		if g != nil {
			g.passed()
		}
		if err := p.deliver(ctx, w, done, *it, r); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// errRefused stands for a call the breaker refused in the fast loop.
var errRefused = errors.New("pipeline: refused by the breaker")

// release reports a permit the fast loop still holds, when the node ends
// before layer 1 took it over: its call said nothing of the dependency.
func (p *proc[In, R, Out]) release() {
	if p.gate.holding {
		p.gate.holding = false
		p.gate.br.Record(p.gate.held, resilience.CallIgnored)
	}
}

// send sends v on ch unless ctx is done first.
func send[T any](ctx context.Context, ch chan<- T, v T) error {
	select {
	case ch <- v:
		return nil
	default:
	}
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// recv receives from ch unless ctx is done first. Before it blocks on an
// empty channel it flushes w, so that gathered output never waits behind an
// idle input.
func recv[T, Out any](ctx context.Context, ch <-chan T, w *writer[Out], done *tally) (T, bool, error) {
	select {
	case v, ok := <-ch:
		return v, ok, nil
	default:
	}
	if done != nil {
		done.flush()
	}
	if w != nil {
		if err := w.flush(ctx); err != nil {
			var zero T
			return zero, false, err
		}
	}
	select {
	case v, ok := <-ch:
		return v, ok, nil
	case <-ctx.Done():
		var zero T
		return zero, false, context.Cause(ctx)
	}
}
