package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/node"
)

// Source adds a node that runs src and returns the stream of what it emits.
func Source[T any](b *Builder, name string, src node.Source[T], opts ...NodeOption) Stream[T] {
	s := b.add(name, KindSource, opts)
	s.validate = func() []error {
		var errs []error
		if isNil(src) {
			errs = append(errs, errors.New("source is nil"))
		}
		if s.cfg.parallel > 1 {
			errs = append(errs, errParallelNotSupported)
		}
		if s.cfg.buffer != -1 {
			errs = append(errs, errors.New("Buffer: a source has no input channel; set Buffer on the nodes that read it"))
		}
		return errs
	}
	s.newRunner = func(nr *nodeRun) runner {
		s := &sourceRunner[T]{nr: nr, src: src, w: newWriter(outEdges[T](nr), &nr.spec.stats.out)}
		if needsFlusher(nr.rs.p.cfg, nr.spec) {
			s.fl = nr.rs.flusher
		}
		return s
	}
	return Stream[T]{b.output(s)}
}

// needsFlusher reports whether the run's flusher looks after source n:
// with batched hand-over it hands over what the source left in a batch,
// and on a broadcast stream what a branch was still owed when an Emit's
// context ended.
func needsFlusher(cfg config, n *spec) bool {
	return cfg.handOver > 1 || len(n.output.consumers) > 1
}

var errParallelNotSupported = errors.New("Parallel: only transforms, sinks, filters and flat maps run in parallel")

// outEdges returns the input edges of every consumer of nr's output.
func outEdges[T any](nr *nodeRun) []edge[T] {
	out := nr.spec.output
	edges := make([]edge[T], len(out.consumers))
	for i, c := range out.consumers {
		edges[i] = nr.rs.edges[c.id].(edge[T])
	}
	return edges
}

type sourceRunner[T any] struct {
	nr    *nodeRun
	src   node.Source[T]
	w     *writer[T]
	count int64 // items emitted in this run
	// returned is set once Run returned for good: a later Emit fails.
	returned atomic.Bool

	// The run's flusher may hand over what the source left pending while
	// the source is idle (see needsFlusher); mu guards the writer against
	// that.
	fl     *flusher
	mu     sync.Mutex
	armed  bool // queued at the flusher
	closed bool
}

func (s *sourceRunner[T]) open(ctx context.Context) error  { return openNode(ctx, s.src) }
func (s *sourceRunner[T]) close(ctx context.Context) error { return closeNode(ctx, s.src) }
func (s *sourceRunner[T]) consumed() bool                  { return s.count > 0 }
func (s *sourceRunner[T]) progress() int64                 { return s.count }
func (s *sourceRunner[T]) restarting()                     {}
func (s *sourceRunner[T]) reopens() bool                   { return hasOpen(s.src) }
func (s *sourceRunner[T]) finish(ctx context.Context) error {
	s.returned.Store(true)
	if s.fl == nil {
		return s.w.close(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.w.close(ctx)
}

// push hands env to the writer; when the flusher looks after the source,
// it holds mu and asks the flusher to look after what it leaves pending. call is the context the
// source passed to Emit: it governs this call alone.
func (s *sourceRunner[T]) push(call context.Context, env envelope[T]) error {
	if call == s.nr.ctx {
		call = nil // the node's own: watched anyway
	}
	if s.fl == nil {
		return s.w.add(s.nr.ctx, call, env)
	}
	s.mu.Lock()
	err := s.w.add(s.nr.ctx, call, env)
	if !s.armed && s.w.pending() {
		s.armed = true
		s.fl.arm(s)
	}
	s.mu.Unlock()
	return err
}

func (s *sourceRunner[T]) tryFlush() flushResult {
	if !s.mu.TryLock() {
		return flushBusy
	}
	defer s.mu.Unlock()
	if s.closed {
		s.armed = false
		return flushDone
	}
	s.armed = s.w.tryFlush()
	if s.armed {
		return flushPending
	}
	return flushDone
}

func (s *sourceRunner[T]) body(ctx context.Context) (err error) {
	defer s.flushCount()
	defer recovered(&err)
	return s.src.Run(ctx, (*emitter[T])(s))
}

// flushCount publishes the writer's count when Run returns, however it
// ends.
func (s *sourceRunner[T]) flushCount() {
	if s.fl != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	s.w.out.flush()
}

// emitter is the Emitter a source writes to: the source runner itself.
type emitter[T any] sourceRunner[T]

func (e *emitter[T]) Emit(ctx context.Context, item T) error {
	s := (*sourceRunner[T])(e)
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.push(ctx, envelope[T]{val: item}); err != nil {
		return err
	}
	s.count++
	return nil
}

func (e *emitter[T]) EmitTracked(ctx context.Context, item T, done func(node.Outcome)) error {
	s := (*sourceRunner[T])(e)
	if done == nil {
		return e.Emit(ctx, item)
	}
	if err := s.check(ctx); err != nil {
		s.nr.rs.reg.call(s.nr.spec.name, done, node.Failed)
		return err
	}
	tr := s.nr.rs.reg.root(s.nr.spec.name, done)
	if err := s.push(ctx, envelope[T]{val: item, tr: tr}); err != nil {
		tr.fire(node.Failed)
		return err
	}
	s.count++
	return nil
}

// hasOpen reports whether v has an Open.
func hasOpen(v any) bool {
	_, ok := v.(node.Opener)
	return ok
}

// ErrEmitAfterReturn is returned by Emit and EmitTracked when they are
// called after the source's Run returned: the item would be lost.
var ErrEmitAfterReturn = errors.New("pipeline: Emit after the source's Run returned")

// check reports why an item cannot be emitted now: the run is stopping,
// the caller's ctx is done, or Run already returned.
func (s *sourceRunner[T]) check(ctx context.Context) error {
	if s.returned.Load() {
		return fmt.Errorf("%w (source %q)", ErrEmitAfterReturn, s.nr.spec.name)
	}
	if s.nr.ctx.Err() != nil {
		return context.Cause(s.nr.ctx)
	}
	if ctx != s.nr.ctx {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// openNode calls v's Open if it has one.
func openNode(ctx context.Context, v any) (err error) {
	o, ok := v.(node.Opener)
	if !ok {
		return nil
	}
	defer recovered(&err)
	return o.Open(ctx)
}

// closeNode calls v's Close if it has one.
func closeNode(ctx context.Context, v any) (err error) {
	c, ok := v.(node.Closer)
	if !ok {
		return nil
	}
	defer recovered(&err)
	return c.Close(ctx)
}

// flushNode calls v's Flush if it has one.
func flushNode(ctx context.Context, v any) (err error) {
	f, ok := v.(node.Flusher)
	if !ok {
		return nil
	}
	defer recovered(&err)
	return f.Flush(ctx)
}
