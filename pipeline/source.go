package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// Source adds a node that runs src and returns the stream of what it emits.
func Source[T any](b *Builder, name string, src node.Source[T], opts ...NodeOption) Stream[T] {
	s := b.add(name, KindSource, opts)
	if r, ok := src.(node.Redeliverer); ok && !isNil(src) {
		s.redeliveries = r.Redeliveries
	}
	if z, ok := src.(node.Sized); ok && !isNil(src) {
		s.size = z.Size
	}
	if r := resumableOf(src); r != nil {
		s.resume = r.Resume
	}
	s.setClock = clockSetterOf(src)
	var handOffAfter func() time.Duration
	if h, ok := src.(deadletter.HandOffSource); ok && !isNil(src) {
		handOffAfter = h.HandOffAfter
	}
	s.validate = func() []error {
		var errs []error
		if isNil(src) {
			errs = append(errs, errors.New("source is nil"))
		}
		switch k := s.cfg.withKey.(type) {
		case nil, func(T) string:
		case error:
			errs = append(errs, k)
		default:
			var want func(T) string
			errs = append(errs, fmt.Errorf("SourceKey: the source emits %s: the key function must be a %T, not %T", reflect.TypeFor[T](), want, k))
		}
		switch h := s.cfg.withTrace.(type) {
		case nil, func(T) map[string]string:
		case error:
			errs = append(errs, h)
		default:
			var want func(T) map[string]string
			errs = append(errs, fmt.Errorf("SourceTraceHeaders: the source emits %s: the headers function must be a %T, not %T", reflect.TypeFor[T](), want, h))
		}
		return errs
	}
	s.newRunner = func(nr *nodeRun) runner {
		s := &sourceRunner[T]{nr: nr, src: src, w: newWriter(outEdges[T](nr), nr.spec)}
		s.tracked = rootOf{src: nr.spec.name, stats: nr.spec.stats, reg: nr.rs.reg}
		if mayReject[T]() {
			s.tracked.rejOf = rootedRejected[T]
		}
		s.ledgered = s.tracked
		s.ledgered.stats = nil
		s.named = rootOf{src: nr.spec.name}
		s.key, _ = nr.spec.cfg.withKey.(func(T) string)
		if nr.rs.tracer != nil {
			// Headers serve only a traced run's spans: without a tracer
			// the function is not called, and items carry nothing.
			s.trace, _ = nr.spec.cfg.withTrace.(func(T) map[string]string)
		}
		if handOffAfter != nil {
			s.handOffAfter = handOffAfter()
		}
		if dw, ok := src.(deadletter.DeadLetterWriter); ok && !isNil(src) {
			rs := nr.rs
			var sink deadletter.Sink
			if rs.p.cfg.deadLetter != nil {
				sink = &sourceLetters{rs: rs, n: nr.spec}
			}
			dw.UseDeadLetter(sink, deadletter.Envelope{
				Pipeline: rs.p.name, RunID: rs.id, OriginNode: nr.spec.name, DecisionNode: nr.spec.name})
		}
		if needsFlusher(nr.rs.p.cfg, nr.spec) {
			s.fl = nr.rs.flusher
		}
		if nr.rs.p.cfg.checkpoint != nil {
			s.led = &ledger{src: nr.spec.name}
			nr.rs.ledgers = append(nr.rs.ledgers, s.led)
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
	nr  *nodeRun
	src node.Source[T]

	// mu guards what follows. Emit takes it for each item: the writer
	// belongs to whichever goroutine holds it, so that the run's flusher
	// can hand over what an idle source left pending (see needsFlusher),
	// and an Emit that races with the end of Run is either taken whole
	// or refused, never half done.
	mu      sync.Mutex
	w       *writer[T]
	count   int64 // items emitted in this run
	running bool  // the source's Run is running: Emit is accepted
	fl      *flusher
	armed   bool // queued at the flusher
	closed  bool
	// handOffAfter is the shortest wait the source's broker takes over
	// (HandOffSource); 0: none.
	handOffAfter time.Duration
	// sctx is the context the source's current Run got (see
	// runState.sourceContext).
	sctx context.Context
	// key is the SourceKey function, trace the SourceTraceHeaders one; nil
	// without.
	key   func(T) string
	trace func(T) map[string]string
	// led is the source's ledger of positions in a run with checkpoints,
	// nil without.
	led *ledger
	// refused is the item of the last EmitAt the ledger noted as refused
	// (hasRefused), until the next EmitAt looks whether it emits it again
	// (see ledger.add).
	refused    T
	hasRefused bool
	// tracked is what the root trackers of the items emitted with
	// EmitTracked share, ledgered those of the items only the ledger
	// tracks. Their rejOf is rootedRejected[T] when an item of type T may
	// be a RejectedItem, else nil (see root): it is made once, as a
	// generic function's value made per item would be an allocation.
	// named only names the source, for an untracked item's tracker: it
	// holds no item.
	tracked, ledgered, named rootOf
}

func (s *sourceRunner[T]) open(ctx context.Context) error  { return openNode(ctx, s.src) }
func (s *sourceRunner[T]) close(ctx context.Context) error { return closeNode(ctx, s.src) }
func (s *sourceRunner[T]) restarting()                     {}
func (s *sourceRunner[T]) reopens() bool                   { return hasOpen(s.src) }

func (s *sourceRunner[T]) consumed() bool { return s.progress() > 0 }

func (s *sourceRunner[T]) progress() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

func (s *sourceRunner[T]) finish(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.w.close(ctx)
}

// push hands item to the writer under mu and, when the flusher looks after
// the source, asks it to look after what is left pending. call is the
// context the source passed to Emit: it governs this call alone. A tracked
// item (done not nil) is tracked only once it can be taken, so that the
// run's end never counts a refused item as one left on its way; tr is its
// tracker when the hand-over failed. at says the item comes from EmitAt,
// at position pos.
func (s *sourceRunner[T]) push(call context.Context, item T, done finisher, pos []byte, at bool) (tr *tracker, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if call == s.sctx || call == s.nr.ctx { // the one Run got first: the usual case
		call = nil // the node's own, or the one its Run got: watched anyway
	}
	if err := s.check(call); err != nil {
		return nil, err
	}
	var key string
	if s.key != nil {
		if key, err = itemKey(s.key, item); err != nil {
			// The program's function failed, not the item: the run fails,
			// whatever the source does with Emit's error.
			s.nr.rs.fail(s.nr.spec.name, err)
			return nil, err
		}
	}
	var headers map[string]string
	if s.trace != nil {
		if headers, err = itemHeaders(s.trace, item); err != nil {
			s.nr.rs.fail(s.nr.spec.name, err)
			return nil, err
		}
	}
	switch {
	case done != nil:
		// Counted now, before any node can settle it: settled never
		// exceeds tracked. A refused item counts too: its done is called.
		s.nr.spec.stats.tracked.Add(1)
		x := key != "" || headers != nil || s.handOffAfter > 0
		tr = s.root(item, &s.tracked, done, x)
		if x {
			tr.extra.key, tr.extra.trace = key, headers
			if s.handOffAfter > 0 {
				tr.extra.ho = newHandOff(item, s.handOffAfter)
			}
		}
	case at && s.led != nil:
		// Tracked for the ledger alone, in emission order: quiet, as
		// nobody waits for it, so it is handed over in batches.
		tr = s.root(item, &s.ledgered, settledByLedger, true)
		tr.extra.key, tr.extra.trace, tr.quiet = key, headers, true
		if s.handOffAfter > 0 {
			tr.extra.ho = newHandOff(item, s.handOffAfter)
		}
		tr.extra.pos, tr.extra.positioned, tr.led = pos, true, s.led
		// The same item, at the same position, as a refused EmitAt's is
		// that item emitted again (see sameValue).
		again := s.hasRefused && sameValue(s.refused, item)
		var zero T
		s.refused, s.hasRefused = zero, false
		s.led.add(tr, again)
	case at || s.key != nil || headers != nil:
		// Not tracked: the tracker only carries the key, headers and
		// position.
		tr = newTrackerWith()
		tr.quiet, tr.of = true, &s.named
		tr.extra.key, tr.extra.trace, tr.extra.pos, tr.extra.positioned = key, headers, pos, at
		tr.refs.Store(1)
	}
	if err := s.w.add(s.nr.ctx, call, envelope[T]{val: item, tr: tr}); err != nil {
		if tr != nil && tr.quiet && tr.led == nil {
			tr = nil // nothing to report
		}
		return tr, err
	}
	s.count++
	if s.fl != nil && !s.armed && s.w.pending() {
		s.armed = true
		s.fl.arm(s)
	}
	return nil, nil
}

// root returns a live root tracker for item, of a source whose roots
// share of. When item may be a RejectedItem and done is not one, the
// tracker is allocated with it (a rooted), so that the item is made an
// interface only if it fails the run; otherwise the tracker is all there
// is (a done that is a RejectedItem is told in the item's stead, see
// rejected). x says the tracker needs its extra, allocated with it.
func (s *sourceRunner[T]) root(item T, of *rootOf, done finisher, x bool) *tracker {
	keep := of.rejOf != nil
	if keep {
		_, told := done.(deadletter.RejectedItem)
		keep = !told
	}
	var t *tracker
	switch {
	case !keep && !x:
		t = &tracker{}
	case !keep:
		t = newTrackerWith()
	case !x:
		t = &(&rooted[T]{item: item}).tracker
	default:
		r := &rootedWith[T]{rooted: rooted[T]{item: item}}
		r.extra = &r.x
		t = &r.tracker
	}
	return s.nr.rs.reg.adopt(t, of, done)
}

// itemKey calls a SourceKey function; a panic there fails the source, which
// names it: the key function is the program's, not the item's.
func itemKey[T any](key func(T) string, item T) (k string, err error) {
	defer recoveredPolicy("the SourceKey function", &err)
	return key(item), nil
}

// itemHeaders calls a SourceTraceHeaders function; a panic there fails the
// source, which names it.
func itemHeaders[T any](headers func(T) map[string]string, item T) (h map[string]string, err error) {
	defer recoveredPolicy("the SourceTraceHeaders function", &err)
	return headers(item), nil
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

func (s *sourceRunner[T]) body(ctx context.Context) error {
	sctx, done := s.nr.rs.sourceContext(ctx)
	defer done()
	s.mu.Lock()
	s.sctx = sctx
	s.mu.Unlock()
	err := s.runSource(sctx)
	if s.nr.rs.drained(err, sctx) {
		return nil // drained: the input ends here, cleanly
	}
	return err
}

func (s *sourceRunner[T]) runSource(sctx context.Context) (err error) {
	s.setRunning(true)
	defer s.setRunning(false)
	defer recovered(&err)
	return s.src.Run(sctx, (*emitter[T])(s))
}

// setRunning says whether the source's Run is running. When it returns,
// the writer's count is published, however it ended.
func (s *sourceRunner[T]) setRunning(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = on
	s.w.hold = false // a burst ends with the Run that began it
	if !on {
		s.w.out.flush()
	}
}

// emitter is the Emitter a source writes to: the source runner itself.
type emitter[T any] sourceRunner[T]

func (e *emitter[T]) Emit(ctx context.Context, item T) error {
	s := (*sourceRunner[T])(e)
	if s.w.max > 1 && s.gathered(ctx, item) {
		// max is set once: with per-item hand-over, every push sends.
		return nil
	}
	_, err := s.push(ctx, item, nil, nil, false)
	return err
}

// gathered is push's common case, taken when all it does is add an
// untracked item to the batch the writer gathers: Run is running, the
// item needs no key and no headers, ctx is the one Run got (or the
// node's), the batch has room (push sends it when full), the flusher, if
// any, is already armed, and check would find nothing. Otherwise it
// reports false and push does the whole work.
func (s *sourceRunner[T]) gathered(ctx context.Context, item T) bool {
	s.mu.Lock()
	w := &s.w.buf
	ok := s.running && s.key == nil && s.trace == nil &&
		len(*w)+1 < s.w.max && (s.fl == nil || s.armed) &&
		(ctx == s.sctx || ctx == s.nr.ctx) &&
		(s.count&(stopEvery-1) != 0 || (s.nr.ctx.Err() == nil && !s.nr.rs.drains.on.Load()))
	if ok {
		*w = append(*w, envelope[T]{val: item})
		s.count++
	}
	s.mu.Unlock()
	return ok
}

func (e *emitter[T]) EmitTracked(ctx context.Context, item T, done func(node.Outcome)) error {
	if done == nil {
		return e.EmitTrackedWith(ctx, item, nil)
	}
	return e.EmitTrackedWith(ctx, item, doneFunc(done))
}

// EmitTrackedWith is EmitTracked with done's Done for done: a source that
// keeps a value per item anyway (a broker's delivery, as a pointer) gives
// it here, and the engine keeps it instead of a closure made per item.
// done is a nil interface for an untracked item, as EmitTracked's done is
// nil; a nil pointer in a non-nil interface is tracked, and its Done is
// called.
//
// When done is also a deadletter.RejectedItem, it is told why the item
// failed the run in the item's stead, and the item is not kept with its
// tracker: a source whose items are RejectedItems only to reach a value
// it keeps per item gives that value, and saves a copy of each item.
//
// The method is not part of node.Emitter: a source finds it with a type
// assertion on the Emitter its Run gets, as BeginBatch, and does without
// when the assertion fails.
func (e *emitter[T]) EmitTrackedWith(ctx context.Context, item T, done interface{ Done(node.Outcome) }) error {
	s := (*sourceRunner[T])(e)
	tr, err := s.push(ctx, item, done, nil, false)
	if err != nil && done != nil {
		// Outside the lock: done is the user's code.
		if tr != nil {
			tr.fire(node.Failed)
		} else {
			s.nr.rs.reg.call(s.nr.spec.name, done, node.Failed)
		}
	}
	return err
}

// BeginBatch starts a burst of emits: until EndBatch, EmitTracked
// gathers tracked items as Emit gathers untracked ones, and hands them
// over a batch of the hand-over's size at a time (WithHandOverBatch)
// instead of each at once. A source whose system gives it items in
// batches (a broker's poll) calls it before it emits one, and EndBatch
// after, so that the hand-over costs a channel operation per batch, not
// per item. Everything else is as without it: each item is taken or
// refused by its own call, in order, and waits under backpressure when a
// batch is full. Items still gathered when the source goes idle without
// EndBatch are handed over by the run's flusher, as untracked ones are.
//
// The method is not part of node.Emitter: a source finds it with a type
// assertion on the Emitter its Run gets, and does without when the
// assertion fails.
func (e *emitter[T]) BeginBatch() {
	s := (*sourceRunner[T])(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.w.hold = true
	}
}

// EndBatch ends a burst that BeginBatch started and hands over what it
// gathered, waiting under backpressure until ctx (the source's, as for
// Emit) or the run ends. The items gathered were taken by their own
// calls: when the wait ends first, they stay gathered, are handed over
// later (by the flusher, or as the source's Run returns), or, when the run
// stops, end Failed with the run. The error says why the wait ended.
func (e *emitter[T]) EndBatch(ctx context.Context) error {
	s := (*sourceRunner[T])(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.w.hold = false
	call := ctx
	if call == s.sctx || call == s.nr.ctx {
		call = nil
	}
	_, err := s.w.send(s.nr.ctx, call)
	if s.fl != nil && !s.armed && s.w.pending() {
		s.armed = true
		s.fl.arm(s)
	}
	return err
}

func (e *emitter[T]) EmitAt(ctx context.Context, item T, pos []byte) error {
	tr, err := (*sourceRunner[T])(e).push(ctx, item, nil, pos, true)
	if tr != nil {
		// Refused: its position holds the ledger back until the source's
		// next EmitAt emits it again, or goes on without it (see
		// ledger.add).
		if tr.led != nil {
			s := (*sourceRunner[T])(e)
			s.mu.Lock()
			s.refused, s.hasRefused = item, true
			s.mu.Unlock()
			tr.led.refuse(tr)
		}
		tr.fire(node.Failed)
	}
	return err
}

// sameValue reports whether b is a, an item refused before: equal to it,
// and a plain value, whose copy the pipeline kept as it was refused. An
// item that holds a pointer, slice, map, channel, function or interface
// may share memory with what the source emits next (a reused buffer), so
// that the two compare equal however different the records are: it
// never counts as the same.
func sameValue(a, b any) bool {
	ta := reflect.TypeOf(a)
	return ta != nil && ta == reflect.TypeOf(b) && plainValue(ta) && reflect.DeepEqual(a, b)
}

// timeType is time.Time's: a plain value, though its location is a
// pointer (to a Location, which nothing changes once made).
var timeType = reflect.TypeFor[time.Time]()

// plainValue reports whether a value of type t holds no reference to
// memory outside it (see sameValue).
func plainValue(t reflect.Type) bool {
	if t == timeType {
		return true
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return true
	case reflect.Array:
		return plainValue(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !plainValue(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// hasOpen reports whether v has an Open; a node.Wrapper has one when
// the node it wraps has (a few levels deep).
func hasOpen(v any) bool {
	for range 8 {
		w, ok := v.(node.Wrapper)
		if !ok {
			break
		}
		v = w.Unwrap()
	}
	_, ok := v.(node.Opener)
	return ok
}

// ErrEmitAfterReturn is returned by Emit and EmitTracked when they are
// called after the source's Run returned: the item would be lost.
var ErrEmitAfterReturn = errors.New("pipeline: Emit after the source's Run returned")

// check reports why an item cannot be emitted now: the source's Run
// returned, the run is stopping, or the call's context (nil: the node's
// own) is done. mu is held.
func (s *sourceRunner[T]) check(call context.Context) error {
	switch {
	case !s.running:
		return fmt.Errorf("%w (source %q)", ErrEmitAfterReturn, s.nr.spec.name)
	case s.count&(stopEvery-1) == 0 && s.nr.ctx.Err() != nil:
		return context.Cause(s.nr.ctx)
	case s.count&(stopEvery-1) == 0 && s.nr.rs.drains.on.Load():
		return ErrDrained
	case call != nil && call.Err() != nil:
		return call.Err()
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
