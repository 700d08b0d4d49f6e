package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
)

// Batch adds a node that gathers the items of in into slices of size
// items. A slice is handed over when it is full, when linger has passed on
// the pipeline's clock since its first item (linger 0 waits for a full
// slice), and when the input ends. A tracked item completes when the batch
// it is in does.
func Batch[T any](b *Builder, name string, in Stream[T], size int, linger time.Duration, opts ...NodeOption) Stream[[]T] {
	s := b.add(name, KindBatch, opts, in.s)
	if inLen := sliceLen[T](); countIn(s, inLen) {
		// A batch of batches: its items are the inner batches' items.
		countOut(s, func(v []T) int {
			n := 0
			for _, x := range v {
				n += inLen(x)
			}
			return n
		})
	} else {
		countOut(s, sliceLen[[]T]())
	}
	s.validate = func() []error {
		var errs []error
		if size < 1 {
			errs = append(errs, fmt.Errorf("Batch size %d: must be at least 1", size))
		}
		if linger < 0 {
			errs = append(errs, fmt.Errorf("Batch linger %s: must not be negative", linger))
		}
		return errs
	}
	s.newEdge = edgeOf[T]
	s.newRunner = func(nr *nodeRun) runner {
		n := nr.spec
		r := newReader(nr.rs.edges[n.id].(edge[T]), n)
		br := &batcher[T]{nr: nr, in: r, w: newWriter(outEdges[[]T](nr), n), size: size, linger: linger}
		r.idle = br.w.flush
		return br
	}
	return Stream[[]T]{b.output(s)}
}

type batcher[T any] struct {
	nr      *nodeRun
	in      *reader[T]
	w       *writer[[]T]
	size    int
	linger  time.Duration
	pending []envelope[T]
	took    bool
	batches int64
}

func (b *batcher[T]) open(context.Context) error       { return nil }
func (b *batcher[T]) close(context.Context) error      { return nil }
func (b *batcher[T]) consumed() bool                   { return b.took }
func (b *batcher[T]) progress() int64                  { return b.batches }
func (b *batcher[T]) restarting()                      {}
func (b *batcher[T]) reopens() bool                    { return false }
func (b *batcher[T]) finish(ctx context.Context) error { return b.w.close(ctx) }

func (b *batcher[T]) body(ctx context.Context) error {
	defer b.in.n.flush()
	defer b.w.out.flush()
	return gather(ctx, b.in, b.nr.rs.p.cfg.clock, b.linger, b.size, &b.pending, &b.took, b.emit)
}

func (b *batcher[T]) emit(ctx context.Context) error {
	if len(b.pending) == 0 {
		return nil
	}
	vals := make([]T, len(b.pending))
	for i, e := range b.pending {
		vals[i] = e.val
	}
	tr := group(b.pending)
	clear(b.pending)
	b.pending = b.pending[:0]
	b.batches++
	return b.w.push(ctx, envelope[[]T]{val: vals, tr: tr})
}

// gather reads in until it ends, appending its envelopes to *pending a run
// at a time (never past size) and calling flush when size are held, when
// linger has passed on clock since the first of them (0: never), and when
// the input ends. took is set once anything was read.
func gather[T any](ctx context.Context, in *reader[T], clock clockwork.Clock, linger time.Duration, size int, pending *[]envelope[T], took *bool, flush func(context.Context) error) error {
	var timer clockwork.Timer
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
	}
	defer stopTimer()
	for {
		var expired <-chan time.Time
		if timer != nil {
			expired = timer.Chan()
		}
		run, ok, timedOut, err := in.nextRunOr(ctx, expired, size-len(*pending))
		switch {
		case err != nil:
			return err
		case timedOut:
			timer = nil
			if err := flush(ctx); err != nil {
				return err
			}
			continue
		case !ok:
			return flush(ctx)
		}
		*took = true
		if len(*pending) == 0 && linger > 0 {
			timer = clock.NewTimer(linger)
		}
		*pending = append(*pending, run...)
		if len(*pending) >= size {
			stopTimer()
			if err := flush(ctx); err != nil {
				return err
			}
		}
	}
}
