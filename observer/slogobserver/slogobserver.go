// Package slogobserver logs what Sluice pipelines do as structured
// records on a [*slog.Logger].
//
// Levels follow what an operator must act on:
//
//	DEBUG  a retry about to wait
//	INFO   a node started, completed, or stopped because the run ended; an
//	       item the dead-letter sink gave back to its broker's retry path
//	WARN   retries exhausted, an item dead-lettered, an item dropped
//	       (its node's failure action is skip), a circuit breaker transition
//	ERROR  a node failed
//
// Every record carries the attributes pipeline, run_id and node, a record
// about one item also its key when the item has one, and its time is the
// event's, from the pipeline's clock. Records below the logger's level cost
// one Enabled call: a pipeline that fails nothing logs only its nodes
// starting and completing.
//
// Per-item failures come in floods: a bad deployment dead-letters
// thousands of items for one reason. So dead letters, broker retries, drops
// and exhausted item retries are grouped by pipeline, run, node, kind of event and
// [Reason], a short form of the error without ids and numbers. The first
// event of a group is logged at once; the later ones are counted, and at
// the end of each interval (10 s, see [WithSummaryEvery]) every group that
// counted some writes one summary at the level of its events:
//
//	level=WARN msg="dead letters" pipeline=orders node=price origin_node=price
//	    count=37 reason="rates: HTTP 400" last_key="order 123" last_error="rates: HTTP 400"
//
// A node's summaries are written when it completes, so a run's are all
// written by the time Run returns; [Observer.Close] writes the rest when a
// program ends. Retries, node lifecycle and breaker transitions are logged
// one record each.
package slogobserver

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// The messages of the records an Observer writes.
const (
	MsgNodeStarted      = "node started"
	MsgNodeCompleted    = "node completed"
	MsgNodeStopped      = "node stopped"
	MsgNodeFailed       = "node failed"
	MsgRetry            = "retry"
	MsgRetriesExhausted = "retries exhausted"
	MsgDeadLettered     = "item dead-lettered"
	MsgBrokerRetry      = "item sent to broker retry"
	MsgDropped          = "item dropped"
	MsgCircuitChanged   = "circuit breaker changed state"

	// The summaries of repeated per-item events, see [WithSummaryEvery].
	MsgDeadLetters      = "dead letters"
	MsgBrokerRetries    = "broker retries"
	MsgDrops            = "drops"
	MsgExhaustedRetries = "exhausted item retries"
)

// DefaultSummaryEvery is the summary interval of an Observer made without
// [WithSummaryEvery].
const DefaultSummaryEvery = 10 * time.Second

// MaxReasons is how many reasons an Observer tells apart at a time for
// the events of one run, node and kind (and a dead letter's origin node,
// an exhausted retry's limit); further ones are counted under the reason
// [OtherReasons]. A reason whose group counted nothing in an interval is
// forgotten at the interval's end, and frees its place.
const MaxReasons = 20

// OtherReasons is the reason of the events beyond [MaxReasons].
const OtherReasons = "(other reasons)"

// An Option configures an Observer.
type Option func(*config)

type config struct {
	every time.Duration
	clock clockwork.Clock
}

// WithSummaryEvery sets the interval of the summaries of repeated per-item
// events: dead letters, drops and exhausted item retries, grouped by
// pipeline, run, node, kind of event (with a dead letter's origin node and
// an exhausted retry's limit) and [Reason]. The first event of a group is
// logged at once, with a reason attribute, and so is the first after an
// interval in which the group had none. The later ones are counted; when
// the interval ends, each group that counted some writes one record with
// count, reason, last_key and last_error, at the time of the last event it
// counts. An interval ends at the first event after its time is up, or by
// a timer that runs only while events are counted; a node's groups are
// also written when it completes, and all of them by [Observer.Flush] and
// [Observer.Close]. The default is [DefaultSummaryEvery]; 0 (or less) logs
// every event as it comes, one record each, without reason.
func WithSummaryEvery(d time.Duration) Option {
	return func(c *config) { c.every = max(d, 0) }
}

// WithClock sets the clock that measures summary intervals; the default,
// and a nil clock, is the real one. The records' times are the events',
// from the pipelines' clocks, whatever this clock says.
func WithClock(clock clockwork.Clock) Option {
	return func(c *config) {
		if clock != nil {
			c.clock = clock
		}
	}
}

// An Observer writes records about the events of the pipelines it is given
// to. It is safe for concurrent use when its logger's handler is, as
// handlers must be. Create one with [New]; [Observer.Close] it when the
// program ends, so that no summary is left unwritten.
type Observer struct {
	h     slog.Handler
	every time.Duration
	clock clockwork.Clock

	mu      sync.Mutex
	closed  bool
	runs    map[runKey]*runGroups
	pending int       // groups with a count above zero
	end     time.Time // of the current interval
	timer   clockwork.Timer
	gen     uint64 // of timer: a timer that fires late for an older one does nothing

	// writing counts the writes of summaries taken out of the groups,
	// which happen outside mu and which Close waits for. Add is called
	// under mu while closed is false, so it happens before Close's Wait.
	writing sync.WaitGroup

	// timerPanic is what the handler panicked with on a summary that
	// the timer's goroutine wrote, where no one could recover it: the
	// next event raises it on its node's goroutine (raised), where the
	// engine turns it into the run's failure, and Close returns it.
	timerPanic atomic.Pointer[error]
	raised     atomic.Bool
}

// New returns an Observer that logs on l; a nil l is [slog.Default].
func New(l *slog.Logger, opts ...Option) *Observer {
	if l == nil {
		l = slog.Default()
	}
	cfg := config{every: DefaultSummaryEvery, clock: clockwork.NewRealClock()}
	for _, o := range opts {
		o(&cfg)
	}
	return &Observer{h: l.Handler(), every: cfg.every, clock: cfg.clock, runs: make(map[runKey]*runGroups)}
}

// OnNodeStarted logs at INFO.
func (o *Observer) OnNodeStarted(e observer.NodeEvent) {
	o.log(slog.LevelInfo, MsgNodeStarted, e.Event)
}

// OnNodeCompleted logs a node that completed without error at INFO. A node
// that stopped because the run ended otherwise (another node failed, or
// the caller cancelled) logs "node stopped" at INFO, with the cause as
// error: the node that failed logs that failure itself, once. Any other
// error, the caller's deadline included, logs "node failed" at ERROR.
//
// The summaries of the node's events still counted are written first: a
// run's summaries are all written by the time its last node completes.
func (o *Observer) OnNodeCompleted(e observer.NodeEvent) {
	o.flushNode(e.Event)
	switch {
	case e.Err == nil:
		o.log(slog.LevelInfo, MsgNodeCompleted, e.Event)
	case e.Stopped:
		o.log(slog.LevelInfo, MsgNodeStopped, e.Event, slog.Any("error", e.Err))
	default:
		o.log(slog.LevelError, MsgNodeFailed, e.Event, slog.Any("error", e.Err))
	}
}

// OnRetry logs at DEBUG, with key, kind, attempt, delay and error.
func (o *Observer) OnRetry(e observer.RetryEvent) {
	if !o.enabled(slog.LevelDebug) {
		return
	}
	o.logKey(slog.LevelDebug, MsgRetry, e.Event, e.Key, slog.String("kind", e.Kind.String()), slog.Int("attempt", e.Attempt),
		slog.Duration("delay", e.Delay), slog.Any("error", e.Err))
}

// OnRetryExhausted logs at WARN, with key, kind, attempts, limit and error.
// Exhausted item retries are summed up as [WithSummaryEvery] says, under
// the message "exhausted item retries"; a node's own retries are not.
func (o *Observer) OnRetryExhausted(e observer.RetryExhaustedEvent) {
	if !o.enabled(slog.LevelWarn) {
		return
	}
	if e.Kind != resilience.ItemRetry {
		o.logItem(&itemEvent{Event: e.Event, kind: exhausted, key: e.Key, retryKind: e.Kind, limit: e.Limit, attempts: e.Attempts, err: e.Err}, "")
		return
	}
	o.item(&itemEvent{Event: e.Event, kind: exhausted, key: e.Key, retryKind: e.Kind, limit: e.Limit, attempts: e.Attempts, err: e.Err})
}

// OnDeadLetter logs at WARN, with key, origin_node, attempts and error,
// summed up as [WithSummaryEvery] says under the message "dead letters".
// An item the dead-letter sink gave back to its broker's retry path
// (e.BrokerRetry) is no dead letter: it logs at INFO, "item sent to broker
// retry", summed up under "broker retries".
func (o *Observer) OnDeadLetter(e observer.DeadLetterEvent) {
	kind := deadLetter
	if e.BrokerRetry {
		kind = brokerRetry
	}
	if !o.enabled(kind.level()) {
		return
	}
	o.item(&itemEvent{Event: e.Event, kind: kind, key: e.Key, origin: e.OriginNode, attempts: e.Attempts, err: e.Err})
}

// OnDrop logs at WARN, with key, attempts and error, summed up as
// [WithSummaryEvery] says under the message "drops". A dropped item is
// data the pipeline did not deliver, as a dead-lettered one, but kept
// nowhere: WARN makes it as visible. Raise the handler's level for nodes
// that skip items by design and in numbers.
func (o *Observer) OnDrop(e observer.DropEvent) {
	if !o.enabled(slog.LevelWarn) {
		return
	}
	o.item(&itemEvent{Event: e.Event, kind: drop, key: e.Key, attempts: e.Attempts, err: e.Err})
}

// OnCircuitStateChanged logs at WARN, with from, to and generation.
//
// It does not raise a handler's panic that the timer caught (see
// [Observer.Close]): a breaker shared by pipelines may change state while
// this one does not run, outside any run's guard, and the panic would end
// the program. The next other event raises it.
func (o *Observer) OnCircuitStateChanged(e observer.CircuitEvent) {
	if !o.h.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	o.logKeyWith(false, slog.LevelWarn, MsgCircuitChanged, e.Event, "", slog.String("from", e.From.String()), slog.String("to", e.To.String()),
		slog.Uint64("generation", e.Generation))
}

// Flush writes the summaries of the events counted so far, as if the
// current interval ended now.
func (o *Observer) Flush() {
	o.mu.Lock()
	out := o.tickLocked(o.clock.Now(), nil)
	o.unlockAndWrite(out)
}

// Close writes the summaries of the events counted so far and stops the
// interval's timer; it returns once every summary is written, those that
// a node's completion, an event, the timer or [Observer.Flush] took out
// before it and still writes included. From then
// on the Observer logs every event as it comes, one record each, so that
// nothing waits for a summary that would never be written. Close returns
// nil, or, when the handler panicked on a summary that the interval's
// timer wrote, an error that says so (that panic is also raised by the
// next event, on its node's goroutine, so that it fails the run as an
// observer's panic does).
func (o *Observer) Close() error {
	o.mu.Lock()
	out := o.tickLocked(o.clock.Now(), nil)
	o.closed, o.runs = true, nil
	o.mu.Unlock()
	o.write(out)
	o.writing.Wait()
	if p := o.timerPanic.Load(); p != nil {
		return *p
	}
	return nil
}

// The kinds of per-item events that an Observer sums up.
type itemKind uint8

const (
	deadLetter itemKind = iota
	drop
	exhausted
	brokerRetry
)

// level is the level of the records of the kind's events: INFO for a
// broker retry, which the broker delivers again, WARN for the others.
func (k itemKind) level() slog.Level {
	if k == brokerRetry {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// An itemEvent holds what records need of a per-item event.
type itemEvent struct {
	observer.Event
	kind      itemKind
	key       string
	origin    string // deadLetter, brokerRetry
	retryKind resilience.RetryKind
	limit     resilience.Limit // exhausted
	attempts  int
	err       error
}

type runKey struct{ pipeline, runID string }

// runGroups holds the groups of one run.
type runGroups struct {
	groups  map[groupKey]*group
	reasons map[sourceKey]int // groups by node and kind, OtherReasons left out
}

// A sourceKey names the events of one node and kind: its groups differ by
// reason only.
type sourceKey struct {
	node   string
	kind   itemKind
	origin string           // deadLetter, brokerRetry
	limit  resilience.Limit // exhausted
}

type groupKey struct {
	sourceKey
	reason string
}

// A group counts the events of one reason since its last record.
type group struct {
	count    int
	lastKey  string
	lastErr  error
	lastTime time.Time
}

// item logs a per-item event at its kind's level, or counts it for a summary.
func (o *Observer) item(e *itemEvent) {
	if o.every == 0 {
		o.logItem(e, "")
		return
	}
	reason := Reason(e.err)
	now := o.clock.Now()
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		o.logItem(e, "")
		return
	}
	var out []slog.Record
	if !now.Before(o.end) {
		out = o.tickLocked(now, out)
	}
	rk := runKey{e.Pipeline, e.RunID}
	rg := o.runs[rk]
	if rg == nil {
		rg = &runGroups{groups: make(map[groupKey]*group), reasons: make(map[sourceKey]int)}
		o.runs[rk] = rg
	}
	gk := groupKey{sourceKey{node: e.Node, kind: e.kind, origin: e.origin, limit: e.limit}, reason}
	g := rg.groups[gk]
	if g == nil && rg.reasons[gk.sourceKey] >= MaxReasons {
		gk.reason = OtherReasons
		g = rg.groups[gk]
	}
	if g == nil {
		rg.groups[gk] = &group{}
		if gk.reason != OtherReasons {
			rg.reasons[gk.sourceKey]++
		}
		o.unlockAndWrite(out)
		o.logItem(e, gk.reason)
		return
	}
	if g.count == 0 {
		o.pending++
		if o.timer == nil {
			o.gen++
			gen := o.gen
			o.timer = o.clock.AfterFunc(o.end.Sub(now), func() { o.fire(gen) })
		}
	}
	g.count++
	g.lastKey, g.lastErr, g.lastTime = e.key, e.err, e.Time
	o.unlockAndWrite(out)
}

// fire ends the interval that the timer of generation gen was set for.
func (o *Observer) fire(gen uint64) {
	o.mu.Lock()
	if gen != o.gen || o.closed {
		o.mu.Unlock()
		return
	}
	o.timer = nil
	out := o.tickLocked(o.clock.Now(), nil)
	o.unlockAndWriteWith(out, o.writeCatching)
}

// writeCatching writes out as write does, on the timer's goroutine: a
// panic of the handler is kept for raise and Close, before the write is
// counted done, so that a Close that waited for it finds it.
func (o *Observer) writeCatching(out []slog.Record) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("slogobserver: the handler panicked on a summary the interval's timer wrote: %v", v)
			o.timerPanic.CompareAndSwap(nil, &err)
		}
	}()
	o.write(out)
}

// raise panics with the handler's panic that the timer caught, once.
func (o *Observer) raise() {
	if p := o.timerPanic.Load(); p != nil && o.raised.CompareAndSwap(false, true) {
		panic(*p)
	}
}

// tickLocked ends the current interval at now: it appends to out the
// summary of every group that counted events, and forgets the groups that
// counted none, so that their reason's next event is logged at once.
func (o *Observer) tickLocked(now time.Time, out []slog.Record) []slog.Record {
	o.end = now.Add(o.every)
	o.stopTimerLocked()
	for rk, rg := range o.runs {
		for gk, g := range rg.groups {
			if g.count > 0 {
				out = append(out, o.summary(rk, gk, g))
				g.count, g.lastErr = 0, nil
				continue
			}
			delete(rg.groups, gk)
			if gk.reason != OtherReasons {
				rg.reasons[gk.sourceKey]--
			}
		}
		if len(rg.groups) == 0 {
			delete(o.runs, rk)
		}
	}
	o.pending = 0
	sortSummaries(out)
	return out
}

// flushNode writes the summaries of the events of e's node, which
// completed, and forgets its groups.
func (o *Observer) flushNode(e observer.Event) {
	if o.every == 0 {
		return
	}
	rk := runKey{e.Pipeline, e.RunID}
	var out []slog.Record
	o.mu.Lock()
	if rg := o.runs[rk]; rg != nil {
		for gk, g := range rg.groups {
			if gk.node != e.Node {
				continue
			}
			if g.count > 0 {
				out = append(out, o.summary(rk, gk, g))
				o.pending--
			}
			delete(rg.groups, gk)
			delete(rg.reasons, gk.sourceKey)
		}
		if len(rg.groups) == 0 {
			delete(o.runs, rk)
		}
		if o.pending == 0 {
			o.stopTimerLocked()
		}
	}
	sortSummaries(out)
	o.unlockAndWrite(out)
}

func (o *Observer) stopTimerLocked() {
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
		o.gen++
	}
}

// summary returns the record that sums up g, at the time of its last
// event.
func (o *Observer) summary(rk runKey, gk groupKey, g *group) slog.Record {
	var msg string
	switch gk.kind {
	case deadLetter:
		msg = MsgDeadLetters
	case brokerRetry:
		msg = MsgBrokerRetries
	case drop:
		msg = MsgDrops
	default:
		msg = MsgExhaustedRetries
	}
	r := slog.NewRecord(g.lastTime, gk.kind.level(), msg, 0)
	r.AddAttrs(slog.String("pipeline", rk.pipeline), slog.String("run_id", rk.runID), slog.String("node", gk.node))
	switch gk.kind {
	case deadLetter, brokerRetry:
		r.AddAttrs(slog.String("origin_node", gk.origin))
	case exhausted:
		r.AddAttrs(slog.String("kind", resilience.ItemRetry.String()), slog.String("limit", gk.limit.String()))
	}
	r.AddAttrs(slog.Int("count", g.count), slog.String("reason", gk.reason))
	if g.lastKey != "" {
		r.AddAttrs(slog.String("last_key", g.lastKey))
	}
	r.AddAttrs(slog.Any("last_error", g.lastErr))
	return r
}

// sortSummaries orders summaries by pipeline, run, node, message, origin
// node, limit and reason, which tell groups apart, so that an interval's
// are written in the same order every time.
func sortSummaries(out []slog.Record) {
	if len(out) < 2 {
		return
	}
	slices.SortFunc(out, func(a, b slog.Record) int {
		ka, kb := sortKey(a), sortKey(b)
		return slices.Compare(ka[:], kb[:])
	})
}

func sortKey(r slog.Record) [7]string {
	var k [7]string
	k[3] = r.Message
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "pipeline":
			k[0] = a.Value.String()
		case "run_id":
			k[1] = a.Value.String()
		case "node":
			k[2] = a.Value.String()
		case "origin_node":
			k[4] = a.Value.String()
		case "limit":
			k[5] = a.Value.String()
		case "reason":
			k[6] = a.Value.String()
		}
		return true
	})
	return k
}

// logItem writes the record of one per-item event; a reason that is not
// empty is added, to match the event with its summaries.
func (o *Observer) logItem(e *itemEvent, reason string) {
	attrs := make([]slog.Attr, 0, 5)
	msg := MsgDropped
	switch e.kind {
	case deadLetter:
		msg = MsgDeadLettered
		attrs = append(attrs, slog.String("origin_node", e.origin))
	case brokerRetry:
		msg = MsgBrokerRetry
		attrs = append(attrs, slog.String("origin_node", e.origin))
	case exhausted:
		msg = MsgRetriesExhausted
		attrs = append(attrs, slog.String("kind", e.retryKind.String()))
	}
	attrs = append(attrs, slog.Int("attempts", e.attempts))
	if e.kind == exhausted {
		attrs = append(attrs, slog.String("limit", e.limit.String()))
	}
	attrs = append(attrs, slog.Any("error", e.err))
	if reason != "" {
		attrs = append(attrs, slog.String("reason", reason))
	}
	o.logKey(e.kind.level(), msg, e.Event, e.key, attrs...)
}

func (o *Observer) enabled(level slog.Level) bool {
	o.raise()
	return o.h.Enabled(context.Background(), level)
}

// unlockAndWrite releases o.mu, which is held, and writes out, the
// summaries taken out of the groups under it. The write is counted in
// o.writing, so that Close, which takes what is left and sets closed under
// o.mu, waits for every summary taken before it. Once closed, the groups
// are gone and out is empty: nothing is added while Close waits.
func (o *Observer) unlockAndWrite(out []slog.Record) {
	o.unlockAndWriteWith(out, o.write)
}

// unlockAndWriteWith is unlockAndWrite writing with write.
func (o *Observer) unlockAndWriteWith(out []slog.Record, write func([]slog.Record)) {
	if len(out) == 0 || o.closed {
		o.mu.Unlock()
		write(out)
		return
	}
	o.writing.Add(1)
	o.mu.Unlock()
	defer o.writing.Done()
	write(out)
}

// write hands records to the handler, outside the Observer's lock.
func (o *Observer) write(out []slog.Record) {
	for _, r := range out {
		_ = o.h.Handle(context.Background(), r)
	}
}

// log writes one record at the event's time. Errors of the handler are
// dropped, as slog.Logger drops them.
func (o *Observer) log(level slog.Level, msg string, e observer.Event, attrs ...slog.Attr) {
	o.logKey(level, msg, e, "", attrs...)
}

// logKey is log with an item's key, an attribute after node unless empty.
func (o *Observer) logKey(level slog.Level, msg string, e observer.Event, key string, attrs ...slog.Attr) {
	o.logKeyWith(true, level, msg, e, key, attrs...)
}

// logKeyWith is logKey, raising the timer's panic first when raise is set.
func (o *Observer) logKeyWith(raise bool, level slog.Level, msg string, e observer.Event, key string, attrs ...slog.Attr) {
	if raise {
		o.raise()
	}
	ctx := context.Background()
	if !o.h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(e.Time, level, msg, 0)
	r.AddAttrs(slog.String("pipeline", e.Pipeline), slog.String("run_id", e.RunID), slog.String("node", e.Node))
	if key != "" {
		r.AddAttrs(slog.String("key", key))
	}
	r.AddAttrs(attrs...)
	_ = o.h.Handle(ctx, r)
}

var _ observer.Observer = (*Observer)(nil)
