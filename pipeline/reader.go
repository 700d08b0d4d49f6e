package pipeline

import (
	"context"
	"sync/atomic"
	"time"
)

// A reader takes one node's input items from its edge and hands them out
// one at a time or in runs. It belongs to one goroutine at a time.
//
// The run's context is its only stop signal: once ctx is done, the reader
// returns its cause instead of receiving more, and it reports the end of
// the input (ok false, no error) only when every writer of the edge closed
// it cleanly. It hands out the rest of a batch it already received, and
// items already waiting, without looking at ctx: the code that calls the
// user's functions on them looks every stopEvery items.
type reader[T any] struct {
	in  inlet[T]
	cur []envelope[T] // the items received last
	i   int           // the next item of cur
	n   tally         // the node's In counter
	// size is the items in one input item, when the node takes batches
	// (nil otherwise), and batches its InBatches counter.
	size    func(T) int
	batches *atomic.Int64
	// idle runs before the reader waits on an empty edge: the node sends
	// what it gathered, so that items never wait behind an idle input.
	idle func(ctx context.Context) error
}

func newReader[T any](e edge[T], n *spec) *reader[T] {
	return &reader[T]{in: e.inlet(), n: tally{dst: &n.stats.in}, size: sizeOf[T](n.inSize), batches: &n.stats.inBatches}
}

// took counts the items of envs in In.
func (r *reader[T]) took(envs []envelope[T]) {
	if r.size == nil {
		r.n.add(int64(len(envs)))
		return
	}
	for i := range envs {
		r.n.add(int64(r.size(envs[i].val)))
	}
	r.batches.Add(int64(len(envs)))
}

// next returns the next item; ok is false once the input ended. It returns
// ctx's cause when it would have to wait and ctx is done.
func (r *reader[T]) next(ctx context.Context) (envelope[T], bool, error) {
	if r.i < len(r.cur) {
		env := r.cur[r.i]
		r.i++
		if r.size == nil {
			r.n.add(1)
		} else {
			r.took(r.cur[r.i-1 : r.i])
		}
		return env, true, nil
	}
	items, ok, _, err := r.more(ctx, nil)
	if !ok {
		return envelope[T]{}, false, err
	}
	r.cur, r.i = items, 1
	r.took(items[:1])
	return items[0], true, nil
}

// nextRun returns the items left of the current run, at least one, or the
// next run received; in per-item hand-over a run is one item. The caller
// is done with the slice when it calls the reader again. ok is false once
// the input ended.
func (r *reader[T]) nextRun(ctx context.Context) ([]envelope[T], bool, error) {
	if r.i < len(r.cur) {
		s := r.cur[r.i:]
		r.i = len(r.cur)
		r.took(s)
		return s, true, nil
	}
	items, ok, _, err := r.more(ctx, nil)
	if !ok {
		return nil, false, err
	}
	r.cur, r.i = items, len(items)
	r.took(items)
	return items, true, nil
}

// nextOr is next that also returns, with timedOut set, when expired fires
// before an item arrives. A nil expired never fires.
func (r *reader[T]) nextOr(ctx context.Context, expired <-chan time.Time) (env envelope[T], ok, timedOut bool, err error) {
	if fired(expired) {
		return env, false, true, nil
	}
	if r.i < len(r.cur) {
		env, ok, err = r.next(ctx)
		return env, ok, false, err
	}
	items, ok, timedOut, err := r.more(ctx, expired)
	if !ok {
		return env, false, timedOut, err
	}
	r.cur, r.i = items, 1
	r.took(items[:1])
	return items[0], true, false, nil
}

// nextRunOr is nextRun that hands out at most limit items (limit ≥ 1) and
// also returns, with timedOut set, when expired fires before an item
// arrives. A nil expired never fires.
func (r *reader[T]) nextRunOr(ctx context.Context, expired <-chan time.Time, limit int) (items []envelope[T], ok, timedOut bool, err error) {
	if fired(expired) {
		return nil, false, true, nil
	}
	if r.i >= len(r.cur) {
		items, ok, timedOut, err := r.more(ctx, expired)
		if !ok {
			return nil, false, timedOut, err
		}
		r.cur, r.i = items, 0
	}
	end := min(len(r.cur), r.i+limit)
	items = r.cur[r.i:end]
	r.i = end
	r.took(items)
	return items, true, false, nil
}

// fired reports whether expired has fired, without waiting; a nil expired
// never fires. It looks only when there is a channel: a select on a nil
// channel costs a call per item.
func fired(expired <-chan time.Time) bool {
	if expired == nil {
		return false
	}
	select {
	case <-expired:
		return true
	default:
		return false
	}
}

// more receives the next items once cur is used up: ok is false at the end
// of the input, when ctx is done (err says why) and when expired fired
// (timedOut). Items already waiting are taken without looking at ctx (the
// callers look before they call the user's code); before it waits it
// publishes the count, runs idle and looks.
func (r *reader[T]) more(ctx context.Context, expired <-chan time.Time) (items []envelope[T], ok, timedOut bool, err error) {
	r.cur, r.i = nil, 0
	items, ended := r.in.poll()
	switch {
	case ended:
		r.n.flush()
		return nil, false, false, nil
	case items != nil:
		return items, true, false, nil
	}
	r.n.flush()
	if ctx.Err() != nil {
		return nil, false, false, context.Cause(ctx)
	}
	if r.idle != nil {
		if err := r.idle(ctx); err != nil {
			return nil, false, false, err
		}
	}
	items, ok, timedOut, err = r.in.receive(ctx, expired)
	if !ok && !timedOut {
		r.n.flush()
	}
	return items, ok, timedOut, err
}
