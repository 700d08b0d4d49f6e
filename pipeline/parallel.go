package pipeline

import (
	"context"
)

// maxChunk is the most items a parallel node deals to one worker at once.
// Dealing in chunks cuts the channel operations per item; chunks stay
// small, and shrink to one item when the input is thin, so that the
// workers share the work evenly and a slow item holds back few others.
const maxChunk = 16

type job[In any] struct {
	env envelope[In]
	t   ticket
}

type result[In, R any] struct {
	job[In]
	r       R
	deliver bool
}

// deal reads the node's input and sends it as chunks to the workers'
// channels in turn, closing them at the end. With a replay window each
// item is a chunk of its own, so that each gets its ticket.
func (p *proc[In, R, Out]) deal(ctx context.Context, jobs []chan []job[In], free []chan []job[In]) error {
	defer func() {
		for _, c := range jobs {
			close(c)
		}
	}()
	n, w := len(jobs), 0
	next := func(i int) int {
		if len(jobs) == 1 {
			return 0
		}
		return (i + 1) % n
	}
	sendChunk := func(c []job[In]) error {
		err := send(ctx, jobs[w], c)
		w = next(w)
		return err
	}
	for {
		if p.in.windowed {
			env, t, ok, err := p.in.next(ctx)
			if err != nil || !ok {
				return err
			}
			c := take(free[w])
			if err := sendChunk(append(c, job[In]{env, t})); err != nil {
				return err
			}
			continue
		}
		items, ok, err := p.in.r.nextRun(ctx)
		if err != nil || !ok {
			return err
		}
		p.in.took = true
		size := min(max(len(items)/p.nr.spec.cfg.parallel, 1), maxChunk)
		for start := 0; start < len(items); start += size {
			c := take(free[w])
			for _, env := range items[start:min(start+size, len(items))] {
				c = append(c, job[In]{env: env})
			}
			if err := sendChunk(c); err != nil {
				return err
			}
		}
	}
}

// minDepth is the fewest chunks a parallel worker's queue holds.
const minDepth = 4

// buffer returns the node's buffer: Buffer(n) if given, else the
// pipeline's.
func (p *proc[In, R, Out]) buffer() int {
	if b := p.nr.spec.cfg.buffer; b >= 0 {
		return b
	}
	return p.nr.rs.p.cfg.buffer
}

// take returns an empty slice, recycled from free when one is there.
func take[T any](free chan []T) []T {
	select {
	case c := <-free:
		return c[:0]
	default:
		return make([]T, 0, maxChunk)
	}
}

// give hands c back to free unless free is full.
func give[T any](free chan []T, c []T) {
	clear(c)
	select {
	case free <- c[:0]:
	default:
	}
}

// ordered runs n workers fed round robin by a dealer; a collector reads the
// workers' results in the same round, which restores the input order
// without sequence numbers. A slow item holds back only the items after it
// in the output; the other workers keep going until their queues are full.
func (p *proc[In, R, Out]) ordered(ctx context.Context) error {
	n := p.nr.spec.cfg.parallel
	// Each worker's queues hold a share of the node's buffer, but at
	// least minDepth chunks: with fewer, a worker that is briefly slow
	// stalls the collector, and the others run dry.
	depth := max(p.buffer()/(n*maxChunk), minDepth)
	g, gctx := newCrew(ctx)
	defer p.nr.group(gctx)()
	jobs := make([]chan []job[In], n)
	jobFree := make([]chan []job[In], n)
	results := make([]chan []result[In, R], n)
	resFree := make([]chan []result[In, R], n)
	for i := range n {
		jobs[i] = make(chan []job[In], depth)
		jobFree[i] = make(chan []job[In], depth+2)
		results[i] = make(chan []result[In, R], depth)
		resFree[i] = make(chan []result[In, R], depth+2)
	}
	g.Go(func() error { return p.deal(gctx, jobs, jobFree) })
	for w := range n {
		g.Go(func() error {
			defer close(results[w])
			for c := range jobs[w] {
				rs := take(resFree[w])
				for k, j := range c {
					if k%stopEvery == 0 {
						if err := p.stopping(gctx); err != nil {
							return err
						}
					}
					// An ordered worker's results wait for the collector
					// in input order anyway: nothing to hand over early.
					r, deliver, err := p.handle(gctx, j.env, j.t, nil)
					if err != nil {
						return err
					}
					rs = append(rs, result[In, R]{j, r, deliver})
				}
				give(jobFree[w], c)
				if err := send(gctx, results[w], rs); err != nil {
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
			rs, ok, err := recv(gctx, results[i%n], out)
			if err != nil || !ok {
				return err
			}
			for _, res := range rs {
				if !res.deliver {
					continue
				}
				// Handing over watches the node's context, not the group's:
				// a delivery cut short by a sibling's failure would leave
				// part of an item downstream and replay it whole.
				if err := p.deliver(ctx, out, &done, res.env, res.r); err != nil {
					return err
				}
				p.in.ack(res.t)
			}
			give(resFree[i%n], rs)
		}
	})
	return g.Wait()
}

// unordered runs n workers on one shared queue; each hands its results over
// through a writer of its own as soon as they are ready.
func (p *proc[In, R, Out]) unordered(ctx context.Context) error {
	n := p.nr.spec.cfg.parallel
	g, gctx := newCrew(ctx)
	defer p.nr.group(gctx)()
	jobs := make(chan []job[In], max(p.buffer()/maxChunk, n*minDepth))
	free := make(chan []job[In], cap(jobs)+n)
	g.Go(func() error { return p.deal(gctx, []chan []job[In]{jobs}, []chan []job[In]{free}) })
	for w := range n {
		g.Go(func() error {
			out := p.writer(w)
			done := tally{dst: &p.nr.spec.stats.out}
			defer done.flush()
			idle := p.idle(out, &done, false)
			for {
				c, ok, err := recv(gctx, jobs, out)
				if err != nil || !ok {
					return err
				}
				for k, j := range c {
					if k%stopEvery == 0 {
						if err := p.stopping(gctx); err != nil {
							return err
						}
					}
					r, deliver, err := p.handle(gctx, j.env, j.t, idle)
					if err != nil {
						return err
					}
					if deliver {
						if err := p.deliver(ctx, out, &done, j.env, r); err != nil { // see ordered
							return err
						}
						p.in.ack(j.t)
					}
				}
				give(free, c)
			}
		})
	}
	return g.Wait()
}
