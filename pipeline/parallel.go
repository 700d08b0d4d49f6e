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
	// st is the retry state of an item that was parked, nil for others.
	st *retryState
}

type result[In, R any] struct {
	job[In]
	r       R
	deliver bool
	// slot, when not nil, holds the result of an item that parked.
	slot *parkSlot
}

// deal reads the node's input and sends it as chunks to the workers'
// channels in turn, closing them at the end. With a replay window each
// item is a chunk of its own, so that each gets its ticket. Each chunk
// takes a hold on pk, which its worker gives up, and, when win is not
// nil, room in win, which the collector gives back.
func (p *proc[In, R, Out]) deal(ctx context.Context, jobs []chan []job[In], free []chan []job[In], pk *parking[job[In]], win *reorderWindow) error {
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
		if win != nil {
			if err := win.acquire(ctx, len(c)); err != nil {
				return err
			}
		}
		pk.enter()
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
			if err := sendChunk(append(c, job[In]{env: env, t: t})); err != nil {
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

// parking returns a new parking for a body of the node, which a drain of
// the run recalls (see goesBack); forget ends that once the body ended.
func (p *proc[In, R, Out]) parking() (pk *parking[job[In]], forget func()) {
	pk = newParking[job[In]](p.nr.rs.p.cfg.clock, p.nr.spec.cfg.maxParkedOr(), nil)
	return pk, p.nr.rs.onDrain(func() { pk.recall(goesBack[In]) })
}

// goesBack says whether a drain takes the parked item j out of its wait,
// for a worker to hand it back to its source's broker: its source takes
// hand-offs, and its broker has not refused this one. A Keyed node's
// parked items stay: its key's later items would be written first.
func goesBack[In any](j job[In]) bool {
	if j.st == nil || j.st.kept || j.env.tr.handOffAny() == nil {
		return false
	}
	j.st.recalled, j.st.late = true, 0
	return true
}

// next returns a parallel worker's next work: a woken parked item
// (resumed), else a chunk of in, which it takes only while pk has room.
// Before it blocks it flushes w. ok is false once the input ended and no
// parked item is left; in is set to nil once it is closed.
func next[In, Out any](ctx context.Context, pk *parking[job[In]], in *chan []job[In], w *writer[Out], done *tally) (c []job[In], resumed job[In], isResumed, ok bool, err error) {
	for {
		if j, ok := pk.take(); ok {
			return nil, j, true, true, nil
		}
		src, room := *in, (<-chan struct{})(nil)
		if src != nil {
			if room = pk.full(); room != nil {
				src = nil // no new input while the parking is full
			}
		}
		var got, open bool
		select {
		case c, open = <-src:
			got = true
		default:
		}
		if !got {
			if done != nil {
				done.flush()
			}
			if w != nil {
				if err := w.flush(ctx); err != nil {
					return nil, job[In]{}, false, false, err
				}
			}
			select {
			case c, open = <-src:
				got = true
			case <-pk.signal:
			case <-room:
			case <-pk.finished:
				return nil, job[In]{}, false, false, nil
			case <-ctx.Done():
				return nil, job[In]{}, false, false, context.Cause(ctx)
			}
		}
		if !got {
			continue
		}
		if !open {
			*in = nil
			pk.end()
			continue
		}
		return c, job[In]{}, false, true, nil
	}
}

// ordered runs n workers fed round robin by a dealer; a collector reads the
// workers' results in the same round, which restores the input order
// without sequence numbers. A slow item holds back only the items after it
// in the output; the other workers keep going until their queues are full.
// An item whose retry waits parks: its result's place in the output is
// kept (a parkSlot), and when its wait ends any worker makes its next call.
// The later items go on meanwhile, their results waiting in the workers'
// result queues, up to the node's reorder window (see [MaxParked]).
func (p *proc[In, R, Out]) ordered(ctx context.Context) error {
	n := p.nr.spec.cfg.parallel
	// Each worker's queues hold a share of the node's buffer, but at
	// least minDepth chunks: with fewer, a worker that is briefly slow
	// stalls the collector, and the others run dry.
	depth := max(p.buffer()/(n*maxChunk), minDepth)
	// The reorder window bounds the items between dealer and collector;
	// the result queues have room for all of them (a chunk holds at least
	// one item, and the dealer deals round robin), so that a worker never
	// waits for the collector while the window has room: it waits only
	// in the dealer, and keeps serving woken items meanwhile.
	winSize := max(windowPerParked*p.nr.spec.cfg.maxParkedOr(), n*depth*maxChunk)
	win := newReorderWindow(winSize)
	resDepth := max(depth, winSize/n+2)
	g, gctx := newCrew(ctx)
	defer p.nr.group(gctx)()
	pk, forget := p.parking()
	defer forget()
	jobs := make([]chan []job[In], n)
	jobFree := make([]chan []job[In], n)
	results := make([]chan []result[In, R], n)
	resFree := make([]chan []result[In, R], n)
	for i := range n {
		jobs[i] = make(chan []job[In], depth)
		jobFree[i] = make(chan []job[In], depth+2)
		results[i] = make(chan []result[In, R], resDepth)
		// The free list keeps every result slice the queue may hold, so
		// that a full window allocates none.
		resFree[i] = make(chan []result[In, R], resDepth+2)
	}
	g.Go(func() error { return p.deal(gctx, jobs, jobFree, pk, win) })
	// resume makes the next call of a woken item, and fills its slot
	// unless it parks again.
	resume := func(j job[In]) error {
		defer pk.leave()
		if err := p.stopping(gctx); err != nil {
			p.unpark(gctx, []job[In]{j})
			return err
		}
		r, deliver, st, err := p.handle(gctx, j.env, j.t, nil, j.st, true)
		if err != nil {
			return err
		}
		if st != nil {
			return p.park(gctx, pk, job[In]{env: j.env, t: j.t, st: st})
		}
		j.st.slot.fill(r, deliver)
		return nil
	}
	for w := range n {
		g.Go(func() error {
			in := jobs[w]
			// sendResults sends rs to the collector, serving woken items
			// while it waits: the collector may wait for one of them.
			sendResults := func(rs []result[In, R]) error {
				for {
					select {
					case results[w] <- rs:
						return nil
					default:
					}
					if j, ok := pk.take(); ok {
						if err := resume(j); err != nil {
							return err
						}
						continue
					}
					select {
					case results[w] <- rs:
						return nil
					case <-pk.signal:
					case <-gctx.Done():
						return context.Cause(gctx)
					}
				}
			}
			closed := false
			defer func() {
				if !closed {
					close(results[w])
				}
			}()
			for {
				c, rj, isResumed, ok, err := next[In, Out](gctx, pk, &in, nil, nil)
				if err != nil {
					return err
				}
				if in == nil && !closed {
					// The collector needs no more of this worker's
					// results; woken items fill their slots.
					closed = true
					close(results[w])
				}
				if !ok {
					return nil
				}
				if isResumed {
					if err := resume(rj); err != nil {
						return err
					}
					continue
				}
				rs := take(resFree[w])
				for k, j := range c {
					if k%stopEvery == 0 {
						if err := p.stopping(gctx); err != nil {
							return err
						}
					}
					// An ordered worker's results wait for the collector
					// in input order anyway: nothing to hand over early.
					r, deliver, st, err := p.handle(gctx, j.env, j.t, nil, nil, true)
					if err != nil {
						return err
					}
					var slot *parkSlot
					if st != nil {
						slot = &parkSlot{done: make(chan struct{})}
						st.slot = slot
						if err := p.park(gctx, pk, job[In]{env: j.env, t: j.t, st: st}); err != nil {
							return err
						}
					}
					rs = append(rs, result[In, R]{job: j, r: r, deliver: deliver, slot: slot})
				}
				give(jobFree[w], c)
				err = sendResults(rs)
				pk.leave()
				if err != nil {
					return err
				}
			}
		})
	}
	g.Go(func() error {
		out := p.writer(0)
		done := tally{dst: &p.nr.spec.stats.out}
		defer done.flush()
		for i := 0; ; i++ {
			rs, ok, err := recv(gctx, results[i%n], out, &done)
			if err != nil || !ok {
				return err
			}
			for _, res := range rs {
				r, deliver := res.r, res.deliver
				if s := res.slot; s != nil {
					if r, deliver, err = waitSlot[R](gctx, s, out); err != nil {
						return err
					}
				}
				if !deliver {
					continue
				}
				// Handing over watches the node's context, not the group's:
				// a delivery cut short by a sibling's failure would leave
				// part of an item downstream and replay it whole.
				if err := p.deliver(ctx, out, &done, res.env, r); err != nil {
					return err
				}
				p.in.ack(res.t)
			}
			win.release(len(rs))
			give(resFree[i%n], rs)
		}
	})
	err := g.Wait()
	p.unpark(gctx, pk.close())
	return err
}

// waitSlot waits for the result of a parked item of an ordered node; what
// the collector gathered is handed over first.
func waitSlot[R, Out any](ctx context.Context, s *parkSlot, out *writer[Out]) (r R, deliver bool, err error) {
	select {
	case <-s.done:
	default:
		if out != nil {
			if err := out.flush(ctx); err != nil {
				return r, false, err
			}
		}
		select {
		case <-s.done:
		case <-ctx.Done():
			return r, false, context.Cause(ctx)
		}
	}
	if s.deliver {
		r = s.r.(R)
	}
	return r, s.deliver, nil
}

// unordered runs n workers on one shared queue; each hands its results over
// through a writer of its own as soon as they are ready. An item whose
// retry waits parks, and when its wait ends the next free worker makes its
// next call.
func (p *proc[In, R, Out]) unordered(ctx context.Context) error {
	n := p.nr.spec.cfg.parallel
	g, gctx := newCrew(ctx)
	defer p.nr.group(gctx)()
	pk, forget := p.parking()
	defer forget()
	jobs := make(chan []job[In], max(p.buffer()/maxChunk, n*minDepth))
	free := make(chan []job[In], cap(jobs)+n)
	g.Go(func() error { return p.deal(gctx, []chan []job[In]{jobs}, []chan []job[In]{free}, pk, nil) })
	for w := range n {
		g.Go(func() error {
			out := p.writer(w)
			done := tally{dst: &p.nr.spec.stats.out}
			defer done.flush()
			idle := p.idle(out, &done, false)
			work := func(j job[In]) error {
				r, deliver, st, err := p.handle(gctx, j.env, j.t, idle, j.st, true)
				if err != nil {
					return err
				}
				if st != nil {
					return p.park(gctx, pk, job[In]{env: j.env, t: j.t, st: st})
				}
				if deliver {
					if err := p.deliver(ctx, out, &done, j.env, r); err != nil { // see ordered
						return err
					}
					p.in.ack(j.t)
				}
				return nil
			}
			in := jobs
			for {
				c, rj, isResumed, ok, err := next(gctx, pk, &in, out, &done)
				if err != nil || !ok {
					return err
				}
				if isResumed {
					err := p.stopping(gctx)
					if err != nil {
						p.unpark(gctx, []job[In]{rj})
					} else {
						err = work(rj)
					}
					pk.leave()
					if err != nil {
						return err
					}
					continue
				}
				for k, j := range c {
					if k%stopEvery == 0 {
						if err := p.stopping(gctx); err != nil {
							pk.leave()
							return err
						}
					}
					if err := work(j); err != nil {
						pk.leave()
						return err
					}
				}
				give(free, c)
				pk.leave()
			}
		})
	}
	err := g.Wait()
	p.unpark(gctx, pk.close())
	return err
}
