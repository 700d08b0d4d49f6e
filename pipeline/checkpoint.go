package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/node"
)

// WithCheckpoint keeps, for every source that emits with EmitAt
// (node.Emitter), the position up to which its items have settled, and
// saves it in store under the pipeline's and the source's names: at most
// every every, on the pipeline's clock, when it moved, and once more when
// the run ends, however it ends (input exhausted, drained, failed or
// cancelled). At the start of each run, a source that implements
// [node.Resumable] is resumed from the position the store holds for it.
//
// A position is committed once its item and every item the source emitted
// with EmitAt before it settled: delivered, filtered, skipped,
// dead-lettered (the sink confirmed the write) or handed off, together
// with everything derived from it (FlatMap parts, Batch members, Route
// branches, items parked for a retry, Aggregate windows, Join pairs). An
// item that ends Failed or Rejected holds the position back for the rest
// of the run. Items emitted with Emit or EmitTracked do not take part.
// See docs/checkpoints.md.
//
// A periodic Save that fails is tried again at the next tick; a final
// Save that fails makes Run return an error naming the source. The final
// Save runs after every item settled or failed, with a context that the
// run's end does not cancel; it ends when the caller cancels Run's
// context during it, when [WithDrainTimeout] passes, or, when the caller
// had cancelled already, after one interval. A sink that buffers
// ([node.Flusher]) holds every position back until its Flush: with one,
// positions are saved only at the end of a run that succeeded. store must
// not be nil and every must be positive.
//
// In a pipeline of one source that implements node.Resumable, an
// [EventTime] [Aggregate] of time windows, without [AllowedLateness] and
// without an idle timeout, keeps a window log: the windows it handed on
// complete and whose output settled are saved with the position, so
// that a run resumed after a crash settles the items it reads again of
// those windows as Filtered instead of handing the windows on again. The
// node's watermark is saved with them, as it was when the node took the
// first item after the saved position, and the resumed run starts the
// node's watermark there: no item read again that was on time is made
// late by it, none reopens a window the log dropped, and, when the items
// reach the node in the order of their positions (and fewer than 16 384
// watermarks come between two saves), an item late before the crash is
// late again; otherwise it may be on time, and settle Filtered in a
// window the log holds. The saved bytes are then a position
// envelope around the source's position; a position saved before, or an
// envelope saved without watermarks, still loads. A window written after
// the last save is handed on again, whole. With several sources no log
// is kept. Build refuses a window key type that does not
// come back equal from JSON
// where a log is kept. See "Positions with open windows" in
// docs/nodes.md.
func WithCheckpoint(store checkpoint.Store, every time.Duration) Option {
	return func(c *config) {
		c.checkpoint, c.checkpointEvery, c.checkpointSet = store, every, true
	}
}

// checkCheckpoint checks WithCheckpoint's arguments.
func checkCheckpoint(cfg config) []error {
	if !cfg.checkpointSet {
		return nil
	}
	var errs []error
	if cfg.checkpoint == nil || isNil(cfg.checkpoint) {
		errs = append(errs, errors.New("WithCheckpoint: the store is nil"))
	}
	if cfg.checkpointEvery <= 0 {
		errs = append(errs, fmt.Errorf("WithCheckpoint(store, %v): the interval must be positive", cfg.checkpointEvery))
	}
	return errs
}

// A ledger follows the items one source emitted with EmitAt in a run
// with checkpoints, in emission order, and the position they settled up
// to. Each item is its root tracker, which settles it when it fires.
//
//	emitted:  p1  p2  p3  p4  p5
//	settled:  ✓   ✓   ·   ✓   ·
//	                  └ q starts here; committed = p2
//
// Once an item fails, nothing after it commits in this run: the ledger
// keeps no item after it.
type ledger struct {
	src string

	mu sync.Mutex
	// q holds the items from the oldest unsettled one, in emission order.
	q     []*tracker
	stuck bool // an item failed: q ends with it
	// refused is the last item added when its EmitAt was refused (the
	// call's context ended while it waited): it holds the position back
	// until the source's next EmitAt, which either emits it again (the
	// same item, at the same position) and takes its place, or moves on
	// without it (another item, or another position) and leaves the
	// ledger stuck at it.
	refused *tracker
	pos     []byte // the committed position
	seq     uint64 // how often pos moved
	// added counts the items added; idx is the index of the committed
	// one (0: none yet).
	added, idx uint64
	// saved is the seq of the last position saved, and savedLogs the
	// window logs' change count then; the saver's own.
	saved, savedLogs uint64
}

// ledger marks of a tracker, guarded by the ledger's mu.
const (
	markPending = iota
	markSettled
	markFailed
)

// add appends t, a root tracker emitted just now; the source's mu is held,
// so that the order is the emission order. again says t's item is that of
// the refused EmitAt before, if any.
func (l *ledger) add(t *tracker, again bool) {
	l.mu.Lock()
	l.added++
	t.idx = l.added
	if r := l.refused; r != nil {
		l.refused = nil
		if !l.stuck {
			// r is q's last: nothing was added after it.
			if again && bytes.Equal(r.extra.pos, t.extra.pos) {
				// Emitted again: t takes its place.
				l.q[len(l.q)-1] = nil
				l.q = l.q[:len(l.q)-1]
			} else {
				// The source went on without it: nothing after it
				// commits in this run, as after a failed item.
				r.mark, l.stuck = markFailed, true
			}
		}
	}
	if !l.stuck {
		l.q = append(l.q, t)
	}
	l.mu.Unlock()
}

// refuse records that t, the last item added, was refused by its EmitAt;
// t is then fired Failed, which settle keeps apart from a failed item's.
func (l *ledger) refuse(t *tracker) {
	l.mu.Lock()
	l.refused = t
	l.mu.Unlock()
}

// settles reports whether an item that ended in o settled: its position
// may be committed.
func settles(o node.Outcome) bool {
	switch o {
	case node.Delivered, node.Filtered, node.Skipped, node.DeadLettered, node.HandedOff:
		return true
	}
	return false
}

// settle records t's outcome and moves the committed position over every
// settled item at the front.
func (l *ledger) settle(t *tracker, o node.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case settles(o):
		t.mark = markSettled
	case t == l.refused:
		// Pending until the source's next EmitAt (see add).
	default:
		t.mark = markFailed
		if !l.stuck {
			l.stuck = true
			for i, u := range l.q {
				if u == t {
					clear(l.q[i+1:])
					l.q = l.q[:i+1]
					break
				}
			}
		}
	}
	for len(l.q) > 0 && l.q[0].mark == markSettled {
		l.pos, l.idx = l.q[0].extra.pos, l.q[0].idx
		l.seq++
		l.q[0] = nil
		l.q = l.q[1:]
	}
}

// committed returns the committed position, how often it moved, and the
// committed item's index.
func (l *ledger) committed() ([]byte, uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pos, l.seq, l.idx
}

// settledByLedger is the done of a root tracker that only a ledger
// follows: firing it settles it in the ledger (see tracker.fire).
var settledByLedger finisher = doneFunc(func(node.Outcome) {})

// origin returns the source and position of the one item t's item
// derives from, when that item was emitted with EmitAt; a batch, window
// or pair of several items has none.
func (t *tracker) origin() (src string, pos []byte, ok bool) {
	for t != nil {
		if t.parents == nil {
			if t.extra == nil || t.of == nil {
				return "", nil, false
			}
			return t.of.src, t.extra.pos, t.extra.positioned
		}
		if len(t.parents) != 1 {
			break
		}
		t = t.parents[0]
	}
	return "", nil, false
}

// resumableOf returns v's Resume: v's own, else that of the node it wraps
// (node.Wrapper, a few levels deep); nil when none has one.
func resumableOf(v any) node.Resumable {
	for range 8 {
		if isNil(v) {
			return nil
		}
		if r, ok := v.(node.Resumable); ok {
			return r
		}
		w, ok := v.(node.Wrapper)
		if !ok {
			return nil
		}
		v = w.Unwrap()
	}
	return nil
}

// resume resumes every resumable source before any node starts: from the
// position the store holds for it with checkpoints, else from the start.
// A node restart within the run does not resume the source again: it
// goes on from its own state.
func (rs *runState) resume(ctx context.Context) error {
	cfg := rs.p.cfg
	for _, n := range rs.p.nodes {
		if n.resume == nil {
			continue
		}
		var pos []byte
		if cfg.checkpoint != nil {
			var err error
			if perr := protect(func() { pos, err = cfg.checkpoint.Load(ctx, rs.p.name, n.name) }); perr != nil {
				err = perr
			}
			if err != nil {
				return &NodeError{Node: n.name, Err: fmt.Errorf("pipeline: checkpoint of source %q: Load: %w", n.name, err)}
			}
			var wins map[string][]loggedWindow
			var wms map[string]time.Time
			if pos, wins, wms, err = decodePosition(pos); err != nil {
				return &NodeError{Node: n.name, Err: fmt.Errorf("pipeline: checkpoint of source %q: %w", n.name, err)}
			}
			if rs.loaded == nil {
				rs.loaded = map[string][]byte{}
			}
			rs.loaded[n.name] = pos
			// Only a pipeline of one source keeps window logs
			// (logsWindows): with several, none reads them.
			rs.restored, rs.restoredWM = wins, wms
		}
		var err error
		if perr := protect(func() { err = n.resume(pos) }); perr != nil {
			err = perr
		}
		if err != nil {
			return &NodeError{Node: n.name, Err: fmt.Errorf("pipeline: source %q: Resume: %w", n.name, err)}
		}
	}
	return nil
}

// flushHolds reports whether a sink of the pipeline buffers
// (node.Flusher): it holds every position back until its Flush, which
// runs only when the run succeeds, so no periodic save is made and the
// final one only after a run that succeeded.
func (rs *runState) flushHolds() bool {
	for _, n := range rs.p.nodes {
		if n.flushes {
			return true
		}
	}
	return false
}

// startSaver starts the goroutine that saves the committed positions
// every interval, on a crew of its own; the function returned stops it,
// cancelling a Save under way (the final save follows), and waits for it.
// Without checkpoints, or with a sink that buffers, it does nothing.
func (rs *runState) startSaver() (stop func()) {
	if len(rs.ledgers) == 0 || rs.flushHolds() {
		return func() {}
	}
	var c crew
	ctx, cancel := context.WithCancel(rs.ctx)
	t := rs.p.cfg.clock.NewTicker(rs.p.cfg.checkpointEvery)
	c.Go(func() error {
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.Chan():
				// A failed Save is tried again at the next tick.
				_ = rs.save(ctx)
			}
		}
	})
	return func() {
		cancel()
		_ = c.Wait()
	}
}

// finalSave saves the positions that moved since the last save once every
// tracker fired. Its context is not cancelled by the run's end: a run
// that failed, drained or was cancelled still saves what settled. It ends
// when the caller's context ends during the save, when the drain timeout
// passes (if one is set), and, when the caller's context had already ended
// as the save began, once one checkpoint interval passed, so that a store
// that hangs cannot keep Run from returning. With a sink that buffers,
// only a run that succeeded (its Flush returned nil) saves.
func (rs *runState) finalSave(parent context.Context, succeeded bool) error {
	if len(rs.ledgers) == 0 || (!succeeded && rs.flushHolds()) {
		return nil
	}
	clock := rs.p.cfg.clock
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	defer cancel(nil)
	if parent.Err() == nil {
		stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
		defer stop()
	} else {
		grace := clock.AfterFunc(rs.p.cfg.checkpointEvery, func() { cancel(context.Cause(parent)) })
		defer grace.Stop()
	}
	if d := rs.p.cfg.drainTimeout; d > 0 {
		t := clock.AfterFunc(d, func() { cancel(ErrDrainTimeout) })
		defer t.Stop()
	}
	return rs.save(ctx)
}

// save saves the committed position of every source whose position moved
// since its last save, and returns the failures, each naming its source.
func (rs *runState) save(ctx context.Context) error {
	var errs []error
	for _, l := range rs.ledgers {
		pos, seq, idx := l.committed()
		var logs uint64
		var err error
		if len(rs.windowLogs) > 0 {
			// Only with one source (logsWindows): its ledger is l. The
			// ledger is read first: a window whose items it committed
			// was recorded before they settled.
			if seq == 0 {
				pos = rs.loaded[l.src] // nothing committed yet in this run
			}
			pos, logs, err = rs.envelope(pos, idx, seq == l.saved, l.savedLogs)
			if err == nil && pos == nil {
				continue // neither moved
			}
		} else if seq == l.saved {
			continue
		} else if bytes.HasPrefix(pos, []byte(envelopeMagic)) {
			// The source's own bytes start as an envelope does: saved
			// in one, they load as they were.
			pos, err = encodePosition(pos, nil, nil)
		}
		if err == nil {
			if perr := protect(func() { err = rs.p.cfg.checkpoint.Save(ctx, rs.p.name, l.src, pos) }); perr != nil {
				err = perr
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline: checkpoint of source %q: %w", l.src, err))
			continue
		}
		l.saved, l.savedLogs = seq, logs
	}
	return errors.Join(errs...)
}

// envelope returns pos in a position envelope with the run's window logs,
// pruned by the committed item idx, and their watermarks as of idx, and
// the logs' change count; nil when the position did not move (same) and
// no log changed since savedLogs.
func (rs *runState) envelope(pos []byte, idx uint64, same bool, savedLogs uint64) ([]byte, uint64, error) {
	wins := make(map[string][]loggedWindow, len(rs.windowLogs))
	wms := make(map[string]time.Time, len(rs.windowLogs))
	var changed uint64
	var errs []error
	for _, wl := range rs.windowLogs {
		ws, wm, ok, n, err := wl.snapshot(idx)
		if err != nil {
			errs = append(errs, err)
		}
		changed += n
		if len(ws) > 0 {
			wins[wl.name()] = ws
		}
		if ok {
			wms[wl.name()] = wm
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	if same && changed == savedLogs {
		return nil, changed, nil
	}
	data, err := encodePosition(pos, wins, wms)
	return data, changed, err
}
