package kafka

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/node"
)

// A pauser stops and starts the fetching of partitions: a *kgo.Client.
type pauser interface {
	PauseFetchPartitions(map[string][]int32) map[string][]int32
	ResumeFetchPartitions(map[string][]int32)
}

// A heldRecord is a tier record the gate holds until it is due.
type heldRecord[R any] struct {
	rec R
	due time.Time
}

// A heldPartition is a tier partition whose head record is not due: its
// fetching is paused, and the records of it the client had already
// returned wait here, in offset order.
type heldPartition[R any] struct {
	recs []heldRecord[R]
	// releasing is set while the gate hands the partition's due records
	// on: a record the poll loop offers meanwhile waits behind them.
	releasing bool
}

// A dueGate holds tier records until they are due, without holding a
// worker or the poll loop: the poll loop offers each record of a tier
// partition in order; one that is due, with nothing of its partition
// held, goes on at once; otherwise the gate holds it, pauses the
// partition's fetching (so that the client buffers nothing more of it),
// and, on the clock, hands the partition's records on in order as each
// comes due, then resumes the partition. A partition that waits holds
// back only itself: another partition of the tier, or of another tier,
// goes on.
type dueGate[R any] struct {
	clock   clockwork.Clock
	client  pauser
	tpOf    func(R) topicPartition
	release func(ctx context.Context, rec R) error
	// gone, when set, reports whether a record's partition is being
	// revoked or is gone: the gate then neither holds it nor pauses its
	// partition (a revoke's drop may already have passed, and a pause
	// would outlive it into the partition's next assignment).
	gone func(R) bool

	mu   sync.Mutex
	held map[topicPartition]*heldPartition[R]
	wake chan struct{} // a new earliest due time; capacity 1
}

// newDueGate returns a gate that pauses partitions on client and hands
// due records to release, which may block (backpressure) and returns an
// error only when its ctx ends; tpOf names a record's partition.
func newDueGate[R any](clock clockwork.Clock, client pauser, tpOf func(R) topicPartition, release func(context.Context, R) error) *dueGate[R] {
	return &dueGate[R]{clock: clock, client: client, tpOf: tpOf, release: release,
		held: map[topicPartition]*heldPartition[R]{}, wake: make(chan struct{}, 1)}
}

// offer takes rec, the next record of its partition that the client
// returned, due at due (zero: now). It reports true when rec is due and
// nothing of its partition waits, or its partition is gone: the caller
// emits it (or, for a partition gone, drops it). Otherwise the gate
// holds it and hands it to release once it and every record before it are
// due.
func (g *dueGate[R]) offer(rec R, due time.Time) bool {
	tp := g.tpOf(rec)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone != nil && g.gone(rec) {
		// The caller's emit drops it (its partition is no longer the
		// source's); holding it would pause a partition no drop resumes.
		return true
	}
	hp := g.held[tp]
	if hp == nil {
		if !g.clock.Now().Before(due) {
			return true
		}
		hp = &heldPartition[R]{}
		g.held[tp] = hp
		g.client.PauseFetchPartitions(map[string][]int32{tp.topic: {tp.partition}})
	}
	hp.recs = append(hp.recs, heldRecord[R]{rec: rec, due: due})
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return false
}

// held returns how many records the gate holds.
func (g *dueGate[R]) heldCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, hp := range g.held {
		n += len(hp.recs)
	}
	return n
}

// run hands held records to release as they come due, until ctx ends; it
// returns ctx's cause.
func (g *dueGate[R]) run(ctx context.Context) error {
	for {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		next, ok := g.nextDue()
		var timer clockwork.Timer
		var fire <-chan time.Time
		if ok {
			timer = g.clock.NewTimer(max(next.Sub(g.clock.Now()), 0))
			fire = timer.Chan()
			if !g.clock.Now().Before(next) {
				// Due already, or the clock moved past next between the
				// read above and the timer's start (a fake clock's
				// Advance), which a timer started from the later time
				// would wait out again.
				fire = dueNow
			}
		}
		select {
		case <-ctx.Done():
		case <-g.wake:
		case <-fire:
			if err := g.releaseDue(ctx); err != nil {
				timer.Stop()
				return err
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// dueNow is a channel that is always ready: a wait already due.
var dueNow = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// nextDue returns the earliest due time of a held partition's head. It
// takes a pending wake under the lock offer sends it under: that wake's
// record is in what nextDue reads, so run does not wake for it again and
// start a second timer from a later Now (on a fake clock, an Advance
// between the two would put the record's due time off by that Advance).
func (g *dueGate[R]) nextDue() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.wake:
	default:
	}
	var next time.Time
	ok := false
	for _, hp := range g.held {
		if len(hp.recs) == 0 || hp.releasing {
			continue
		}
		if d := hp.recs[0].due; !ok || d.Before(next) {
			next, ok = d, true
		}
	}
	return next, ok
}

// releaseDue hands on, partition by partition, the held records that are
// due, each partition's in order, and resumes a partition that has none
// left.
func (g *dueGate[R]) releaseDue(ctx context.Context) error {
	for {
		tp, recs := g.takeDue()
		if recs == nil {
			return nil
		}
		for i, r := range recs {
			if err := g.release(ctx, r); err != nil {
				g.giveBack(tp, recs[i:])
				return err
			}
		}
		g.released(tp)
	}
}

// takeDue takes the due records at the head of one held partition, and
// marks it releasing; nil when no partition has one.
func (g *dueGate[R]) takeDue() (topicPartition, []R) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	for tp, hp := range g.held {
		if hp.releasing {
			continue
		}
		var recs []R
		for len(hp.recs) > 0 && !now.Before(hp.recs[0].due) {
			recs = append(recs, hp.recs[0].rec)
			hp.recs = hp.recs[1:]
		}
		if recs != nil {
			hp.releasing = true
			return tp, recs
		}
	}
	return topicPartition{}, nil
}

// giveBack puts recs, which release did not take, back at the head of
// tp's records.
func (g *dueGate[R]) giveBack(tp topicPartition, recs []R) {
	g.mu.Lock()
	defer g.mu.Unlock()
	hp := g.held[tp]
	if hp == nil {
		return // dropped meanwhile: revoked
	}
	back := make([]heldRecord[R], 0, len(recs)+len(hp.recs))
	for _, r := range recs {
		back = append(back, heldRecord[R]{rec: r})
	}
	hp.recs = append(back, hp.recs...)
	hp.releasing = false
}

// released ends the release of tp's due records: tp is resumed when
// nothing of it is held any more.
func (g *dueGate[R]) released(tp topicPartition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	hp := g.held[tp]
	if hp == nil {
		return // dropped meanwhile: revoked
	}
	hp.releasing = false
	if len(hp.recs) == 0 {
		delete(g.held, tp)
		g.client.ResumeFetchPartitions(map[string][]int32{tp.topic: {tp.partition}})
	}
}

// drop forgets the held records of the partitions of parts (revoked or
// lost: the new owner reads them again) and resumes their fetching, so
// that a partition this member is given back is not left paused. It
// returns the records dropped.
func (g *dueGate[R]) drop(parts map[string][]int32) []R {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []R
	for topic, ps := range parts {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			hp := g.held[tp]
			if hp == nil {
				continue
			}
			for _, h := range hp.recs {
				out = append(out, h.rec)
			}
			delete(g.held, tp)
			g.client.ResumeFetchPartitions(map[string][]int32{topic: {p}})
		}
	}
	return out
}

// dropAll is drop of every held partition, as a run ends: it returns the
// records the gate held, which were never emitted.
func (g *dueGate[R]) dropAll() []R {
	g.mu.Lock()
	parts := map[string][]int32{}
	for tp := range g.held {
		parts[tp.topic] = append(parts[tp.topic], tp.partition)
	}
	g.mu.Unlock()
	return g.drop(parts)
}

// fetchWait is the longest a fetch waits for records at a broker (Kafka's
// own default, fetch.max.wait.ms; franz-go's is 5 s). A partition whose
// start the client looks up (a partition with no committed offset, newly
// assigned) is fetched only once the fetch under way at its broker
// returns: with franz-go's wait, a member that joined a group could read
// one partition for 5 s before the others started. The cost is a fetch
// request every fetchWait per broker while the topic is idle.
const fetchWait = 500 * time.Millisecond

// tierFetchWait is the longest a fetch waits for records at a broker
// when the source consumes tiers: a tier partition the due gate resumes
// is fetched only once the fetch under way at its broker returns, so
// this bounds how late a record behind a released one comes (the
// client's default is 5s).
const tierFetchWait = 250 * time.Millisecond

// tierOpts are the consumer client's options for the tiers.
func (s *Source) tierOpts() []kgo.Opt {
	if !s.cfg.Retry.Enabled {
		return nil
	}
	return []kgo.Opt{kgo.FetchMaxWait(tierFetchWait)}
}

// errDue ends a poll when the due gate released records, so that the
// Run's goroutine emits them (an emitter is the Run's alone).
var errDue = errors.New("kafka: tier records are due")

// A tierRun is one Run's due gate, and what the gate released for the
// Run's goroutine to emit.
type tierRun struct {
	sess *session
	gate *dueGate[*record]

	mu    sync.Mutex
	ready []*record
	wake  context.CancelCauseFunc // ends the poll under way; nil between polls
}

// startTiers starts the due gate of a Run on sess, when the source
// consumes tiers; stop ends it, and gives back, unsettled, what it holds
// and what it released that was not emitted.
func (s *Source) startTiers(sess *session) (stop func()) {
	if !s.cfg.Retry.Enabled {
		return func() {}
	}
	t := &tierRun{sess: sess}
	t.gate = newDueGate(s.cfg.Clock, sess.cl, func(r *record) topicPartition { return r.track.tp }, t.released)
	t.gate.gone = func(r *record) bool { return sess.tracker.revoking(r.track) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = t.gate.run(ctx)
	}()
	s.g.mu.Lock()
	s.g.tiers.Store(t)
	s.g.mu.Unlock()
	return func() {
		cancel()
		<-done
		s.g.mu.Lock()
		s.g.tiers.Store(nil)
		s.g.mu.Unlock()
		for _, r := range t.gate.dropAll() {
			r.giveBack()
		}
		t.mu.Lock()
		ready := t.ready
		t.ready = nil
		t.mu.Unlock()
		for _, r := range ready {
			r.giveBack()
		}
	}
}

// gateHeld returns how many records the Run's due gate holds, not yet
// due; 0 without one.
func (s *Source) gateHeld() int {
	t := s.tierRun()
	if t == nil {
		return 0
	}
	return t.gate.heldCount()
}

// tierRun returns the Run's due gate, nil for none.
func (s *Source) tierRun() *tierRun {
	return s.g.tiers.Load()
}

// released queues r, which the gate found due, for the Run's goroutine,
// and wakes it: from its poll, or from its wait for room (r is held).
func (t *tierRun) released(_ context.Context, r *record) error {
	t.mu.Lock()
	t.ready = append(t.ready, r)
	wake := t.wake
	t.mu.Unlock()
	if wake != nil {
		wake(errDue)
	}
	select {
	case t.sess.freed <- struct{}{}:
	default:
	}
	return nil
}

// pollContext returns the context of one poll: ctx, ended early when the
// gate releases records or a record is to be emitted again. end must be
// called when the poll returns.
func (s *Source) pollContext(ctx context.Context, sess *session) (pctx context.Context, end func()) {
	pctx, cancel := context.WithCancelCause(ctx)
	sess.againMu.Lock()
	if len(sess.again) > 0 {
		cancel(errAgain)
	}
	sess.wake = cancel
	sess.againMu.Unlock()
	t := s.tierRun()
	if t != nil {
		t.mu.Lock()
		if len(t.ready) > 0 {
			cancel(errDue)
		}
		t.wake = cancel
		t.mu.Unlock()
	}
	return pctx, func() {
		if t != nil {
			t.mu.Lock()
			t.wake = nil
			t.mu.Unlock()
		}
		sess.againMu.Lock()
		sess.wake = nil
		sess.againMu.Unlock()
		cancel(nil)
	}
}

// emitReady emits, in order, the records the gate released. On an error
// the rest go back unsettled.
func (s *Source) emitReady(ctx context.Context, out node.Emitter[Message]) error {
	t := s.tierRun()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	ready := t.ready
	t.ready = nil
	t.mu.Unlock()
	for i, r := range ready {
		if err := s.emitGuarded(ctx, r, out); err != nil {
			for _, rest := range ready[i+1:] {
				rest.giveBack()
			}
			return err
		}
	}
	return nil
}

// dropHeld gives back, unsettled, the records the gate holds of the
// partitions of m, revoked or lost from sess, and resumes their fetching.
// The gate of a Run on another session is not sess's to touch.
func (s *Source) dropHeld(sess *session, m map[string][]int32) {
	t := s.tierRun()
	if t == nil || t.sess != sess {
		return
	}
	for _, r := range t.gate.drop(m) {
		r.giveBack()
	}
}

// arrive takes rec as the poll returned it: a record this process
// replaced, or a copy another group's source made, is settled without
// being emitted; a tier record waits in the
// due gate until it is due; any other is emitted (emitGuarded).
func (s *Source) arrive(ctx context.Context, rec *record, out node.Emitter[Message]) error {
	s.know(rec)
	if s.wasReplaced(rec) || s.othersCopy(rec) {
		rec.settleUnemitted()
		return nil
	}
	if t := s.tierRun(); t != nil {
		if d, ok := s.cfg.Retry.tierDelay(s.cfg.Topic, rec.kr.Topic); ok && !t.gate.offer(rec, tierDue(rec.g.copied().due, s.cfg.Clock.Now(), d)) {
			return nil
		}
	}
	return s.emitGuarded(ctx, rec, out)
}

// tierDue returns when a tier record read at now, in a tier of delay, is
// due: the due time its copy carries (HeaderDue), but never later than
// the tier's delay from now. The carried time is the copying process's
// clock; one far ahead of the source's (a clock running fast, a forged
// header) would otherwise pause the tier partition, and every copy behind
// it, until then.
func tierDue(carried, now time.Time, delay time.Duration) time.Time {
	if bound := now.Add(delay); carried.After(bound) {
		return bound
	}
	return carried
}

// emitGuarded emits rec after the crash ledger's turn and the poison
// guard's count on arrival.
func (s *Source) emitGuarded(ctx context.Context, rec *record, out node.Emitter[Message]) error {
	if handled, err := s.crashTurn(ctx, rec); handled || err != nil {
		return err
	}
	if handled, err := s.poisonOnArrival(ctx, rec); handled || err != nil {
		return err
	}
	return s.emit(ctx, rec, out)
}

// emitted returns the Message of rec: for a copy the source made, it
// names the record first produced, and its deliveries go on from the
// copy's.
func (r *record) emitted() Message {
	m := r.message()
	c := r.g.copied()
	m.Deliveries = 1 + r.src.reads.before(r.key()) + c.deliveries
	if c.ok && c.topic != "" {
		m.Topic, m.Partition, m.Offset = c.topic, c.partition, c.offset
	}
	return m
}

// emitMessage returns the Message of rec to emit, and keeps its
// deliveries for rec's copies.
func (r *record) emitMessage() Message {
	m := r.emitted()
	r.g.deliveries = m.Deliveries
	return m
}

// deliveries returns the Deliveries of rec's Message as it was emitted.
func (r *record) deliveries() int { return r.g.deliveries }
