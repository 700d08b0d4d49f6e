package pipeline

import (
	"context"
	"runtime/debug"

	"golang.org/x/sync/errgroup"

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
	// fast is set when layer 1 has nothing to do (no retries, no breaker)
	// and there is no replay window: the node then calls its function on
	// whole runs of input with one panic guard per run, through loop when
	// the node kind has one.
	fast bool
	loop loopFunc[In, Out]
}

// A loopFunc calls the node's function on items[*j:], advancing *j, and
// hands the results over through w (a sink counts them in done). It stops
// at the first item whose call fails and returns that call's error as
// itemErr, or returns err when handing over fails, which ends the node.
type loopFunc[In, Out any] func(ctx context.Context, w *writer[Out], done *tally, items []envelope[In], j *int) (itemErr, err error)

// A deliverFunc hands the result r of item env downstream through w, or,
// for a sink, marks the item delivered and counts it in done.
type deliverFunc[In, R, Out any] func(ctx context.Context, w *writer[Out], done *tally, env envelope[In], r R) error

func newProc[In, R, Out any](nr *nodeRun, user any, call func(context.Context, In) (R, error), deliver deliverFunc[In, R, Out]) *proc[In, R, Out] {
	n := nr.spec
	p := &proc[In, R, Out]{nr: nr, user: user, call: call, deliver: deliver, sink: n.output == nil}
	r := newReader(nr.rs.edges[n.id].(*edge[In]), &n.stats.in, &nr.rs.stop)
	window := 0
	if n.res.NodeRestart.MaxRestarts > 0 {
		window = n.res.NodeRestart.MaxReplayWindow
	}
	p.in = newInbox(r, window)
	p.fast = window == 0 && n.res.ItemRetry.MaxRetries == 0 && n.breaker == nil
	if !p.sink {
		writers := 1
		if n.cfg.parallel > 1 && n.cfg.unordered {
			writers = n.cfg.parallel
		}
		edges := outEdges[Out](nr)
		for range writers {
			p.writers = append(p.writers, newWriter(edges, &n.stats.out))
		}
		if n.cfg.parallel == 1 {
			r.idle = p.writers[0].flush
		}
	}
	return p
}

func (p *proc[In, R, Out]) open(ctx context.Context) error  { return openNode(ctx, p.user) }
func (p *proc[In, R, Out]) close(ctx context.Context) error { return closeNode(ctx, p.user) }
func (p *proc[In, R, Out]) consumed() bool                  { return p.in.took }
func (p *proc[In, R, Out]) progress() int64                 { return p.in.progress() }
func (p *proc[In, R, Out]) restarting()                     { p.in.rewind() }

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
	switch {
	case p.nr.spec.cfg.parallel > 1 && (p.nr.spec.cfg.unordered || p.sink):
		return p.unordered(ctx)
	case p.nr.spec.cfg.parallel > 1:
		return p.ordered(ctx)
	case p.fast:
		return p.runs(ctx)
	default:
		return p.sequential(ctx)
	}
}

// handle runs one item through layer 1 and its failure action; it reports
// whether there is a result to deliver.
func (p *proc[In, R, Out]) handle(ctx context.Context, env envelope[In], t ticket) (R, bool, error) {
	r, fl := attempt(ctx, p.nr, p.call, env.val, t.prior)
	if fl == nil {
		return r, true, nil
	}
	if err := p.nr.itemFailed(ctx, env.val, env.tr, fl); err != nil {
		p.in.spent(t, fl.calls)
		return r, false, err
	}
	p.in.ack(t)
	return r, false, nil
}

func (p *proc[In, R, Out]) sequential(ctx context.Context) error {
	w := p.writer(0)
	done := tally{dst: &p.nr.spec.stats.out}
	defer done.flush()
	for {
		env, t, ok, err := p.in.next(ctx)
		if err != nil || !ok {
			return err
		}
		r, deliver, err := p.handle(ctx, env, t)
		if err != nil {
			return err
		}
		if deliver {
			if err := p.deliver(ctx, w, &done, env, r); err != nil {
				return err
			}
			p.in.ack(t)
		}
	}
}

// runs is the sequential loop without layer 1: it takes whole runs of
// input and calls the node's function on each item under one panic guard.
func (p *proc[In, R, Out]) runs(ctx context.Context) error {
	w := p.writer(0)
	done := tally{dst: &p.nr.spec.stats.out}
	defer done.flush()
	for {
		items, ok, err := p.in.r.nextRun(ctx)
		if err != nil || !ok {
			return err
		}
		p.in.took = true
		for i := 0; i < len(items); {
			j, fl, err := p.run(ctx, w, &done, items, i)
			if err != nil {
				return err
			}
			if fl == nil {
				break
			}
			if err := p.nr.itemFailed(ctx, items[j].val, items[j].tr, fl); err != nil {
				return err
			}
			i = j + 1
		}
	}
}

// run processes items[i:] until one fails; it returns the failed item's
// index and failure, or an error that ends the node.
func (p *proc[In, R, Out]) run(ctx context.Context, w *writer[Out], done *tally, items []envelope[In], i int) (j int, fl *failure, err error) {
	j = i
	defer func() {
		if v := recover(); v != nil {
			fl = p.nr.oneFailure(&resilience.PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	if p.loop != nil {
		ierr, err := p.loop(ctx, w, done, items, &j)
		if ierr != nil {
			return j, p.nr.oneFailure(ierr), nil
		}
		return j, nil, err
	}
	for ; j < len(items); j++ {
		r, cerr := p.call(ctx, items[j].val)
		if cerr != nil {
			return j, p.nr.oneFailure(cerr), nil
		}
		if err := p.deliver(ctx, w, done, items[j], r); err != nil {
			return j, nil, err
		}
	}
	return j, nil, nil
}

type job[In any] struct {
	env envelope[In]
	t   ticket
}

type result[In, R any] struct {
	job[In]
	r       R
	deliver bool
}

// ordered runs n workers fed round robin by a dispatcher; a collector reads
// the workers' results in the same round, which restores the input order
// without sequence numbers or allocation. A slow item holds back only the
// items after it in the output; the other workers keep going until their
// queues are full.
func (p *proc[In, R, Out]) ordered(ctx context.Context) error {
	n := p.nr.spec.cfg.parallel
	depth := max(p.nr.rs.p.cfg.buffer/n, 1)
	g, gctx := errgroup.WithContext(ctx)
	jobs := make([]chan job[In], n)
	results := make([]chan result[In, R], n)
	for i := range n {
		jobs[i] = make(chan job[In], depth)
		results[i] = make(chan result[In, R], depth)
	}
	g.Go(func() error {
		defer func() {
			for _, c := range jobs {
				close(c)
			}
		}()
		for i := 0; ; i++ {
			env, t, ok, err := p.in.next(gctx)
			if err != nil || !ok {
				return err
			}
			if err := send(gctx, jobs[i%n], job[In]{env, t}); err != nil {
				return err
			}
		}
	})
	for w := range n {
		g.Go(func() error {
			defer close(results[w])
			for j := range jobs[w] {
				r, deliver, err := p.handle(gctx, j.env, j.t)
				if err != nil {
					return err
				}
				if err := send(gctx, results[w], result[In, R]{j, r, deliver}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		out := p.writer(0)
		done := tally{dst: &p.nr.spec.stats.out}
		defer done.flush()
		for i := 0; ; i++ {
			res, ok, err := recv(gctx, results[i%n], out)
			if err != nil || !ok {
				return err
			}
			if !res.deliver {
				continue
			}
			if err := p.deliver(gctx, out, &done, res.env, res.r); err != nil {
				return err
			}
			p.in.ack(res.t)
		}
	})
	return g.Wait()
}

// unordered runs n workers on one shared queue; each hands its results over
// through a writer of its own as soon as they are ready.
func (p *proc[In, R, Out]) unordered(ctx context.Context) error {
	n := p.nr.spec.cfg.parallel
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan job[In], max(p.nr.rs.p.cfg.buffer, n))
	g.Go(func() error {
		defer close(jobs)
		for {
			env, t, ok, err := p.in.next(gctx)
			if err != nil || !ok {
				return err
			}
			if err := send(gctx, jobs, job[In]{env, t}); err != nil {
				return err
			}
		}
	})
	for w := range n {
		g.Go(func() error {
			out := p.writer(w)
			done := tally{dst: &p.nr.spec.stats.out}
			defer done.flush()
			for {
				j, ok, err := recv(gctx, jobs, out)
				if err != nil || !ok {
					return err
				}
				r, deliver, err := p.handle(gctx, j.env, j.t)
				if err != nil {
					return err
				}
				if deliver {
					if err := p.deliver(gctx, out, &done, j.env, r); err != nil {
						return err
					}
					p.in.ack(j.t)
				}
			}
		})
	}
	return g.Wait()
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
func recv[T, Out any](ctx context.Context, ch <-chan T, w *writer[Out]) (T, bool, error) {
	select {
	case v, ok := <-ch:
		return v, ok, nil
	default:
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
