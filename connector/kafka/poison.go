package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// ErrPoison is matched by the error in the dead-letter envelope of a
// record that the source stopped delivering because it failed
// MaxDeliveries runs (see SourceConfig.MaxDeliveries), or crashed the
// consumer (see [ErrCrashed]).
var ErrPoison = errors.New("kafka: poison record")

// copyTimeout bounds the wait for the ack of one copy, and for the
// dead-letter write of a poison record.
const copyTimeout = 10 * time.Second

// maxReplaced bounds the records a source remembers as replaced by a
// copy; past it, it starts afresh (a record read again after that is
// emitted with the count it carries, at least once).
const maxReplaced = 100_000

// messageType is how deadletter.TypeOf names a Message.
var messageType = deadletter.TypeOf(Message{})

// A guard is what a source keeps for its retry topics, its poison guard
// and its crash ledger, from run to run.
type guard struct {
	letters  broker.Letters
	poisoned atomic.Int64

	mu sync.Mutex
	// copies produces the copies; nil when the source makes none (open
	// from Open to Close).
	copies *copier
	// crash is the crash ledger, open from Open to Close; nil for none.
	// It is set under mu, and read without it by each record's emit.
	crash atomic.Pointer[crashledger.Ledger]
	// replaced are the records replaced by a copy, or dead-lettered: read
	// again (their partition's commit was held back by a neighbour), they
	// are settled without being emitted.
	replaced map[topicPartitionOffset]struct{}
	// kept is the story of a record whose failed run no copy could carry
	// (the copy or the dead letter failed): its next read in this process
	// goes on from it.
	kept map[topicPartitionOffset]story
	// settling counts the records whose failed run is being settled (a
	// copy or a dead letter on its way): a session waits for them before
	// its last commit. Not a sync.WaitGroup: a record may be rejected
	// while a closing session waits, an Add from zero during a Wait.
	settling settlingCount
	// inflight finds a record in flight by its message's CorrelationID,
	// for the DeadLetter sink of an item derived from a Message; kept only
	// with Retry.
	inflight sync.Map
	// tiers is the run's due gate and what it released; nil outside a Run
	// or without Retry. It is set under mu, and read without it by each
	// record's arrival.
	tiers atomic.Pointer[tierRun]
}

// A recordGuard is what the guard knows of one record read.
type recordGuard struct {
	// carried is what the record's headers carried, when it is a copy the
	// source made, nil when it is none (most records: a pointer keeps the
	// record, allocated once per record polled, small); read it with
	// copied. past is its story, with what this process kept, nil for
	// none (the zero story: again a pointer for a small record); read it
	// with pastStory.
	carried *carried
	past    *story
	// first names the record first produced: the record itself, or the
	// one a copy is of.
	first topicPartitionOffset
	// deliveries is the Deliveries of the record's Message.
	deliveries int
	// rejected is why the record failed the run (Message.Rejected).
	rejected atomic.Pointer[deadletter.Envelope]
	// crash is the record's crash ledger entry; nil without a ledger.
	crash *crashledger.Entry
}

// notCopied is what copied returns for a record that is no copy.
var notCopied carried

// copied returns what the record's headers carried: the zero carried for
// a record that is no copy. The caller must not change it.
func (g *recordGuard) copied() *carried {
	if g.carried == nil {
		return &notCopied
	}
	return g.carried
}

// noStory is what pastStory returns for a record with no story.
var noStory story

// pastStory returns the record's story: the zero story for one with
// none. The caller must not change it.
func (g *recordGuard) pastStory() *story {
	if g.past == nil {
		return &noStory
	}
	return g.past
}

// guardProblems returns the problems of c's retry, poison and crash
// settings, each a [*ConfigError].
func guardProblems(c SourceConfig) []error {
	var errs []error
	bad := func(field string, v any, why string) {
		errs = append(errs, &ConfigError{Field: field, Value: v, Reason: why})
	}
	if c.MaxDeliveries < 0 {
		bad("MaxDeliveries", c.MaxDeliveries, "must not be negative; 0 sets no limit")
	}
	if c.CrashAloneWait < 0 {
		bad("CrashAloneWait", c.CrashAloneWait, "must not be negative")
	}
	if c.CrashAloneWait > 0 && c.CrashLedger == "" {
		bad("CrashAloneWait", c.CrashAloneWait, "needs CrashLedger")
	}
	return append(errs, c.Retry.problems(c.Topic)...)
}

// makesCopies reports whether the source produces copies: of records that
// wait (Retry) or that failed a run (MaxDeliveries).
func (c SourceConfig) makesCopies() bool { return c.Retry.Enabled || c.MaxDeliveries > 0 }

// openGuard starts what the source's guard needs for a run: the copies'
// producer, the tiers (Retry.Declare) and the crash ledger.
func (s *Source) openGuard(ctx context.Context) error {
	if (s.cfg.MaxDeliveries > 0 || s.cfg.CrashLedger != "") && s.g.letters.Sink() == nil {
		field := "MaxDeliveries"
		if s.cfg.CrashLedger != "" {
			field = "CrashLedger"
		}
		return resilience.MarkPermanent(&ConfigError{Field: field, Value: s.fieldValue(field),
			Reason: "a poison record goes to " + broker.NoDeadLetterSink})
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if s.cfg.makesCopies() && s.g.copies == nil {
		sent := &sentWatch{}
		cl, err := kgo.NewClient(producerOpts(s.cfg.Brokers, copyTimeout, s.cfg.DialTimeout, s.cfg.Dial, sent)...)
		if err != nil {
			return resilience.MarkPermanent(fmt.Errorf("kafka: source of %s: copies: %w", s.cfg.Topic, err))
		}
		c := &copier{cl: cl, sent: sent, clock: s.cfg.Clock, timeout: copyTimeout,
			consumer: consumerName(s.cfg.Topic, s.cfg.Group), topic: s.cfg.Topic, retry: s.cfg.Retry}
		if s.cfg.Retry.Enabled && s.cfg.Retry.Declare {
			dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
			err := declareTiers(dctx, kadm.NewClient(cl), s.cfg.Topic, s.cfg.Retry.TierTopics(s.cfg.Topic))
			cancel()
			if err != nil {
				c.close(s.cfg.CloseTimeout)
				return err
			}
		}
		s.g.copies = c
	}
	if err := s.openCrashLedgerLocked(); err != nil {
		if s.g.copies != nil {
			s.g.copies.close(s.cfg.CloseTimeout)
			s.g.copies = nil
		}
		return err
	}
	return nil
}

// fieldValue returns the value of a field of the config that a
// ConfigError of openGuard names.
func (s *Source) fieldValue(field string) any {
	if field == "CrashLedger" {
		return s.cfg.CrashLedger
	}
	return s.cfg.MaxDeliveries
}

// closeGuard closes what openGuard started.
func (s *Source) closeGuard() error {
	s.g.mu.Lock()
	c := s.g.copies
	s.g.copies = nil
	s.g.mu.Unlock()
	if c != nil {
		c.close(s.cfg.CloseTimeout)
	}
	return s.closeCrashLedger()
}

// copier returns the copies' producer, nil when the source is closed.
func (s *Source) copier() *copier {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	return s.g.copies
}

// UseDeadLetter is how the pipeline gives the source its dead-letter
// sink, for poison records and records that crashed the consumer
// (deadletter.DeadLetterWriter).
func (s *Source) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	s.g.letters.Use(sink, base)
}

// Poisoned returns how many poison records the source dead-lettered:
// records that failed MaxDeliveries runs, and records that crashed the
// consumer.
func (s *Source) Poisoned() int64 { return s.g.poisoned.Load() }

// know reads what the guard knows of rec as it arrives: what its headers
// carried, and what this process kept of it.
func (s *Source) know(rec *record) {
	g := &rec.g
	g.carried = nil
	if len(rec.kr.Headers) > 0 {
		if c := carriedOf(rec.kr.Headers, s.consumer); c.ok {
			kept := c // only a copy's escapes to the heap
			g.carried = &kept
		}
	}
	c := g.copied()
	g.past = nil
	if c.ok {
		g.past = &g.carried.past
	}
	g.first = rec.key()
	if c.ok && c.topic != "" {
		g.first = topicPartitionOffset{topicPartition{c.topic, c.partition}, c.offset}
	}
	if !s.cfg.makesCopies() {
		return
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if st, ok := s.g.kept[rec.key()]; ok {
		g.past = &st
	}
}

// wasReplaced reports whether rec was replaced by a copy or dead-lettered
// by this process.
func (s *Source) wasReplaced(rec *record) bool {
	if !s.cfg.makesCopies() {
		return false
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	_, ok := s.g.replaced[rec.key()]
	return ok
}

// replace records that rec is done with for good: replaced by its copy,
// or dead-lettered. Its kept story goes.
func (s *Source) replace(rec *record) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if s.g.replaced == nil || len(s.g.replaced) >= maxReplaced {
		s.g.replaced = map[topicPartitionOffset]struct{}{}
	}
	s.g.replaced[rec.key()] = struct{}{}
	delete(s.g.kept, rec.key())
}

// keep records st, the story of rec after a failed run no copy could
// carry, for its next read in this process. It is kept however many are
// kept: a record whose count is lost would fail runs without end.
func (s *Source) keep(rec *record, st story) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if s.g.kept == nil {
		s.g.kept = map[topicPartitionOffset]story{}
	}
	s.g.kept[rec.key()] = st
}

// Rejected keeps why the message failed the run (deadletter.RejectedItem):
// the copy that the source produces, once the item's outcome says
// Rejected, carries it.
func (m Message) Rejected(env deadletter.Envelope) {
	if m.r != nil {
		m.r.g.rejected.Store(&env)
	}
}

// Rejected is Message.Rejected for the record itself. The record is the
// done the source gives the pipeline's EmitTrackedWith, and a done that
// is a deadletter.RejectedItem is told in the item's stead: the engine
// then keeps no copy of the Message in each record's tracker.
func (r *record) Rejected(env deadletter.Envelope) {
	r.g.rejected.Store(&env)
}

// rejected takes over the settling of rec, whose outcome is o, when o is
// Rejected and the source has the poison guard: the count of failed runs
// goes on in a copy of the record, or the record goes to the dead-letter
// sink, on a goroutine of its own (done must not block), and the record
// settles once the copy or the letter is stored. It reports whether it
// took rec over.
func (s *Source) rejected(rec *record, o node.Outcome) bool {
	if o != node.Rejected || s.cfg.MaxDeliveries <= 0 {
		return false
	}
	s.g.settling.add()
	go func() {
		defer s.g.settling.done()
		rec.finish(s.recount(rec))
	}()
	return true
}

// waitSettling waits, until ctx ends, for the failed runs being settled.
func (s *Source) waitSettling(ctx context.Context) { s.g.settling.wait(ctx) }

// A settlingCount counts the failed runs being settled. Unlike a
// sync.WaitGroup it may count up from zero while a wait is under way
// (a wait then ends once the count is zero again, or at its context's
// end), and a wait its context ended leaves no goroutine behind.
type settlingCount struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n falls to 0; made when it rises from 0
}

func (c *settlingCount) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.zero = make(chan struct{})
	}
	c.n++
}

func (c *settlingCount) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.zero)
	}
}

// wait waits until the count is zero or ctx ends.
func (c *settlingCount) wait(ctx context.Context) {
	for {
		c.mu.Lock()
		if c.n == 0 {
			c.mu.Unlock()
			return
		}
		zero := c.zero
		c.mu.Unlock()
		select {
		case <-zero:
		case <-ctx.Done():
			return
		}
	}
}

// recount settles rec, which failed a run, and reports whether it
// settled. When the runs it failed, this one included, reach
// MaxDeliveries, it writes rec to the dead-letter sink; otherwise it
// produces the copy of rec, counting the run, to the topic itself, and
// waits for its ack. Either way the original is then settled, committed
// past once the records before it are. When the copy or the letter fails,
// or its outcome is unknown, the original is not settled (it is read
// again) and its count is kept in process, so that the guard still fires
// within one process.
//
// The copy goes to the end of the record's partition of the topic: the
// record's neighbours do not wait for it, and it runs again after the
// records produced meanwhile, its key's later records among them (see
// docs/kafka.md, "Poison records").
func (s *Source) recount(rec *record) bool {
	ctx, cancel := context.WithTimeout(rec.sess.ctx, copyTimeout)
	defer cancel()
	st := rec.g.pastStory().told(s.rejectedEnvelope(rec), s.cfg.Clock.Now(), true)
	st.failures = rec.g.pastStory().failures + 1
	store := func(ctx context.Context) error { return s.poisonLetter(ctx, rec, st) }
	if st.failures < s.cfg.MaxDeliveries {
		c := s.copier()
		if c == nil {
			s.keep(rec, st)
			return false
		}
		store = func(ctx context.Context) error { return c.topicCopy(ctx, rec.kr, s.copySpec(rec, st)) }
	}
	if stored, _ := s.storeInstead(ctx, rec, store); !stored {
		s.keep(rec, st)
		return false
	}
	return true
}

// storeInstead stores what stands in for rec (its copy, its dead letter)
// with store, registered as a copy under way: a revoke of rec's partition
// waits for it (session.waitCopies) and, once it is stored, commits past
// rec (offsetTracker.endCopy), so that the partition's next reader does
// not read rec again beside what stands in for it. The store has
// copyTimeout, the most the revoke waits for it. It reports whether it was
// stored, with store's error; it stores nothing when rec is gone already
// (its next reader reads it).
func (s *Source) storeInstead(ctx context.Context, rec *record, store func(context.Context) error) (bool, error) {
	if !rec.beginCopy() {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	err := store(ctx)
	// A letter that the source's own DeadLetter sink took and wrote
	// nowhere (retrySink: rec went while it wrote) stands in for nothing.
	stored := err == nil && !rec.unwritten.Load()
	if stored {
		s.replace(rec)
	}
	rec.endCopy(stored)
	return stored, err
}

// rejectedEnvelope is what the engine told of rec's failed run, or, when
// it told nothing (a node restart took the item up, or the engine could
// not say), that the run still failed because of it.
func (s *Source) rejectedEnvelope(rec *record) deadletter.Envelope {
	if env := rec.g.rejected.Load(); env != nil {
		return *env
	}
	return deadletter.Envelope{Attempts: 1, LastFailure: s.cfg.Clock.Now(), ErrText: "failed the run"}
}

// copySpec returns what a copy of rec with story st says.
func (s *Source) copySpec(rec *record, st story) copySpec {
	return copySpec{topic: rec.g.first.topic, partition: rec.g.first.partition, offset: rec.g.first.offset,
		deliveries: rec.deliveries(), story: st}
}

// poisonLetter writes rec, which failed st.failures runs, to the
// pipeline's dead-letter sink, with the envelope telling each failed run.
func (s *Source) poisonLetter(ctx context.Context, rec *record, st story) error {
	msg := rec.emitted()
	why := fmt.Errorf("%w: record %s failed %d runs; MaxDeliveries is %d",
		ErrPoison, msg.CorrelationID(), st.failures, s.cfg.MaxDeliveries)
	sink, env := s.g.letters.Letter(msg, messageType, why, msg.CorrelationID(), s.cfg.Clock.Now())
	if sink == nil {
		return fmt.Errorf("kafka: record %s is poison and the pipeline has no dead-letter sink", msg.CorrelationID())
	}
	env.Attempts = max(st.attempts, st.failures)
	env.History = append([]deadletter.Attempt(nil), st.history...)
	env.FirstFailure = st.first
	if st.origin != "" {
		env.OriginNode = st.origin
	}
	if n := len(st.history); n > 0 {
		env.LastFailure = st.history[n-1].Time
	}
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("kafka: dead-letter poison record %s: %w", msg.CorrelationID(), err)
	}
	s.g.poisoned.Add(1)
	return nil
}

// poisonOnArrival writes rec to the dead-letter sink, without emitting
// it, when the runs it failed already reach MaxDeliveries (a count kept
// in process because no copy could carry it, or a lower MaxDeliveries
// than the copy was made under), and settles it. It reports whether it
// did; an error of the sink ends Run, rec unsettled.
func (s *Source) poisonOnArrival(ctx context.Context, rec *record) (bool, error) {
	if s.cfg.MaxDeliveries <= 0 || rec.g.pastStory().failures < s.cfg.MaxDeliveries {
		return false, nil
	}
	stored, err := s.storeInstead(ctx, rec, func(ctx context.Context) error {
		return s.poisonLetter(ctx, rec, *rec.g.pastStory())
	})
	if !stored {
		return true, s.notStored(rec, err)
	}
	rec.settleUnemitted()
	return true, nil
}

// notStored gives back rec, which arrived and for which storeInstead
// stored nothing, and returns the error that ends Run: err, unless rec
// was gone (revoked before or during the store), when its next reader
// reads it and the Run goes on.
func (s *Source) notStored(rec *record, err error) error {
	gone := rec.gone()
	rec.giveBack()
	if gone {
		return nil
	}
	return err
}

// settleUnemitted settles rec, never emitted: replaced by a copy or
// dead-lettered by the source itself.
func (r *record) settleUnemitted() {
	if r.ended.CompareAndSwap(false, true) {
		r.finish(true)
	}
}
