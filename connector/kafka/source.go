package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A Source consumes a topic into a pipeline as a member of a consumer
// group. It is a [node.Source] of [Message] with Open and Close: the
// pipeline opens it (a client, which joins the group), runs it, and
// closes it (a last commit, and the client leaves the group).
//
// Every record is emitted with EmitTracked and settled by its outcome:
// Delivered, Filtered, Skipped, DeadLettered and HandedOff settle it (but
// DeadLettered for an item that the [Source.DeadLetter] sink wrote
// nowhere, the record being gone: its next reader reads it again);
// Failed while the Run goes on (a blameless failure, such as a busy key)
// emits it again in the run; Failed and Rejected (the run ended first, or
// failed because of it) leave it unsettled. A record whose tier copy was
// stored (Retry) settles once the copy is acked, whatever its item's
// outcome: the copy stands in for it (a batch whose write then failed on
// another record does not deliver it twice). Per partition, the source commits the lowest offset
// not yet settled, so a record is committed only once it and every record
// before it in its partition settled, however out of order they finish
// (as they do under pipeline.Keyed or pipeline.Parallel). A record left
// unsettled is read again by the next Run, or by the partition's next
// owner, with the records after it that were already done: delivery is at
// least once, and sinks must be idempotent.
//
// Commits are batched: every CommitInterval on Clock, at a drain, at
// Close, and when the group revokes partitions from the source, after
// their records in flight settled or RevokeTimeout passed. Partitions lost
// (the source fell out of the group) commit nothing.
//
// Two ways to stop: cancelling the run's context (or draining the
// pipeline) stops polling, and the records polled but not emitted are
// left for the next reader; [Source.Stop] ends Run cleanly after emitting
// what was polled, and Close then waits (up to DrainTimeout) for the items
// in flight to settle so that they are committed.
type Source struct {
	cfg SourceConfig

	mu    sync.Mutex
	sess  *session
	drain bool // the Run on sess ended by Stop

	stopCtx  context.Context
	stopFunc context.CancelFunc

	redelivers atomic.Int64
	reads      readCounts

	// missing is, per topic whose fetches said it is unknown (deleted),
	// when they first did on Clock; a topic's records clear it. Run's
	// goroutine alone uses it.
	missing map[string]time.Time

	// g is the source's retry topics, poison guard and crash ledger
	// (retry.go, poison.go, crash.go).
	g guard

	// consumer is consumerName of the source's topic and group, what
	// HeaderConsumer holds in the copies it makes: computed once, as
	// every record polled is checked against it.
	consumer string

	// opts are more client options, for tests.
	opts []kgo.Opt
}

// NewSource returns a Source for cfg, or every problem of cfg joined, each
// a [*ConfigError].
func NewSource(cfg SourceConfig) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg.withDefaults(), consumer: consumerName(cfg.Topic, cfg.Group)}
	s.reads.counts = map[topicPartitionOffset]int{}
	s.stopCtx, s.stopFunc = context.WithCancel(context.Background())
	return s, nil
}

// Config returns the source's config with defaults applied.
func (s *Source) Config() SourceConfig { return s.cfg }

// topics returns the topics the source consumes.
func (s *Source) topics() []string {
	return append([]string{s.cfg.Topic}, s.cfg.Retry.TierTopics(s.cfg.Topic)...)
}

// Open starts a client, which joins the group, and checks that the
// topic exists. A cluster that cannot be reached is transient, so node
// retry can run Open again; a topic that does not exist is permanent.
func (s *Source) Open(ctx context.Context) error {
	if err := s.openGuard(ctx); err != nil {
		return err
	}
	sess, err := s.openSession(ctx)
	if err != nil {
		_ = s.closeGuard()
		return err
	}
	s.mu.Lock()
	old := s.sess
	s.sess, s.drain = sess, false
	s.mu.Unlock()
	if old != nil { // opened twice without a Close: do not leak the first
		old.close(context.Background(), false)
	}
	return nil
}

// Run polls records and emits each until ctx is done or Stop is called.
// It returns nil after Stop and the context's cause when ctx is done. A
// Run called again on an open source starts again from the group's
// committed offsets: it rejoins the group with a new client.
func (s *Source) Run(ctx context.Context, out node.Emitter[Message]) error {
	if s.stopCtx.Err() != nil {
		return nil // stopped for good
	}
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return ErrNotOpen
	}
	if sess.ran.Swap(true) {
		// The client's positions are past what the last run left
		// unsettled: start afresh from the committed offsets.
		// The old client commits and leaves first (within CloseTimeout
		// each; see session.close), so that the new one
		// reads the group's offsets after that commit.
		s.mu.Lock()
		s.sess = nil
		s.mu.Unlock()
		_ = sess.close(ctx, false)
		fresh, err := s.openSession(ctx)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.sess, s.drain = fresh, false
		s.mu.Unlock()
		sess = fresh
		sess.ran.Store(true)
	}
	pollCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.stopCtx, func() { cancel(errStopped) })()
	defer context.AfterFunc(sess.lostCtx, func() { cancel(context.Cause(sess.lostCtx)) })()
	defer context.AfterFunc(sess.refusedCtx, func() { cancel(context.Cause(sess.refusedCtx)) })()
	defer s.startTiers(sess)()
	sess.openAgain()
	defer sess.closeAgain()
	for {
		if err := s.emitAgain(ctx, sess, out); err != nil {
			return err
		}
		if err := s.emitReady(ctx, out); err != nil {
			return err
		}
		if s.stopCtx.Err() != nil {
			s.setDrain()
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if sess.refusedCtx.Err() != nil {
			return context.Cause(sess.refusedCtx)
		}
		if sess.lostCtx.Err() != nil {
			return resilience.MarkTransient(context.Cause(sess.lostCtx))
		}
		// Records settled and not yet committed take room too, so that
		// a process that dies leaves at most MaxInFlight records done
		// and not committed (but for those behind a record still in
		// flight in their partition).
		// Tier records that the due gate holds take no room: they wait
		// on a paused partition, which buffers nothing more, and would
		// otherwise stop the main topic until they are due.
		pending := sess.tracker.pending()
		held := int(sess.held.Load())
		room := s.cfg.MaxInFlight - (held - s.gateHeld()) - pending
		if room <= 0 {
			if pending > 0 {
				sess.nudgeCommit()
			}
			select {
			case <-ctx.Done():
			case <-s.stopCtx.Done():
			case <-sess.lostCtx.Done():
			case <-sess.refusedCtx.Done():
			case <-sess.freed:
			}
			continue
		}
		if m := s.cfg.MaxPollRecords; m > 0 && room > m {
			room = m
		}
		if err := s.poll(ctx, pollCtx, sess, room, out); err != nil {
			return err
		}
	}
}

// emitAgain emits again, in order per partition, the records whose item
// ended Failed while the Run went on. When ctx is done, or an emit fails,
// the rest go back unsettled.
func (s *Source) emitAgain(ctx context.Context, sess *session, out node.Emitter[Message]) error {
	recs := sess.takeAgain()
	b := s.burst(out, len(recs))
	if b != nil {
		b.BeginBatch()
	}
	var err error
	for _, r := range recs {
		if err != nil || ctx.Err() != nil {
			r.giveBack()
			continue
		}
		err = s.emitGuarded(ctx, r, out)
	}
	if b != nil {
		_ = b.EndBatch(ctx) // as in poll
	}
	return err
}

// A batcher is the pipeline's Emitter when it can hand a burst of
// tracked items over in batches: EmitTracked between BeginBatch and
// EndBatch gathers instead of handing each item over at once (see
// pipeline's emitter). Every item is still taken or refused by its own
// call, so the source's work per record is the same with it or without.
type batcher interface {
	BeginBatch()
	EndBatch(ctx context.Context) error
}

// burst returns out as a batcher for the emits of n records polled at
// once, or nil: for one record there is nothing to gather, and with the
// crash ledger a record may wait for the turn of one emitted before it,
// which must then be on its way, not gathered.
func (s *Source) burst(out node.Emitter[Message], n int) batcher {
	b, ok := out.(batcher)
	if !ok || n < 2 {
		return nil
	}
	if s.g.crash.Load() != nil {
		return nil
	}
	return b
}

// errStopped ends a poll when Stop is called.
var errStopped = errors.New("kafka: source stopped")

// poll polls up to n records and emits them.
func (s *Source) poll(ctx, pollCtx context.Context, sess *session, n int, out node.Emitter[Message]) error {
	pctx, endPoll := s.pollContext(pollCtx, sess)
	fetches := sess.cl.PollRecords(pctx, n)
	endPoll()
	krs := make([]*kgo.Record, 0, fetches.NumRecords())
	fetches.EachRecord(func(r *kgo.Record) {
		delete(s.missing, r.Topic)
		krs = append(krs, r)
	})
	recs := sess.trackPoll(krs)
	// Rebalances wait from the poll to here, so that every record polled
	// is tracked before its partition can be revoked.
	sess.cl.AllowRebalance()
	b := s.burst(out, len(recs))
	if b != nil {
		b.BeginBatch()
	}
	var emitErr error
	for _, rec := range recs {
		if emitErr != nil || ctx.Err() != nil {
			// Left for the next reader: not committed.
			rec.giveBack()
			continue
		}
		emitErr = s.arrive(ctx, rec, out)
	}
	if b != nil {
		// The items gathered were taken: when the hand-over's wait ends
		// first (the run stops), the Run's own checks say why.
		_ = b.EndBatch(ctx)
	}
	if emitErr != nil {
		return emitErr
	}
	if fetches.IsClientClosed() {
		return resilience.MarkTransient(fmt.Errorf("kafka: consume %s: %w", s.cfg.Topic, ErrConnectionLost))
	}
	var ferr error
	unknown := false
	fetches.EachError(func(topic string, partition int32, err error) {
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
			// Retriable to the client, which goes on fetching; a topic
			// deleted stays unknown, and fails the run (missingTopic).
			unknown = true
			if _, ok := s.missing[topic]; !ok {
				if s.missing == nil {
					s.missing = map[string]time.Time{}
				}
				s.missing[topic] = s.cfg.Clock.Now()
			}
		case ferr != nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
			errors.As(err, &loss), connectionLost(err), kerr.IsRetriable(err), rejoins(err):
			// The client goes on by itself: a poll cut short, a reset
			// offset after a truncation, a broker that comes back, a
			// member the group dropped that joins again.
		default:
			ferr = classify(fmt.Errorf("kafka: consume %s partition %d: %w", topic, partition, err))
		}
	})
	if ferr == nil && unknown {
		ferr = s.missingTopic(ctx, sess)
	}
	return ferr
}

// MissingTopicWait is how long, on the source's Clock, the fetches of a
// topic may say it is unknown before the source asks the cluster whether
// it exists, and fails the run when it does not (it was deleted).
const MissingTopicWait = time.Minute

// missingTopic asks the cluster, once a topic's fetches said it is unknown
// for MissingTopicWait, whether the source's topics exist, and returns
// the permanent error naming a topic that does not; nil while the wait
// is not over, or when every topic exists (its count starts again).
func (s *Source) missingTopic(ctx context.Context, sess *session) error {
	now := s.cfg.Clock.Now()
	over := false
	for _, since := range s.missing {
		if now.Sub(since) >= MissingTopicWait {
			over = true
		}
	}
	if !over {
		return nil
	}
	err := sess.check(ctx)
	if err == nil || errors.Is(err, ErrUnknownTopic) {
		clear(s.missing)
	}
	if errors.Is(err, ErrUnknownTopic) {
		return err
	}
	return nil
}

// rejoins reports whether err is the group dropping the member (its
// partitions lost), which the client answers by joining again.
func rejoins(err error) bool {
	var gs *kgo.ErrGroupSession
	if !errors.As(err, &gs) {
		return false
	}
	return errors.Is(gs.Err, kerr.UnknownMemberID) || errors.Is(gs.Err, kerr.IllegalGeneration) ||
		errors.Is(gs.Err, kerr.RebalanceInProgress) || kerr.IsRetriable(gs.Err) || connectionLost(gs.Err)
}

// emit emits rec's message, unless its partition was revoked since it
// was polled.
func (s *Source) emit(ctx context.Context, rec *record, out node.Emitter[Message]) error {
	if !rec.sess.tracker.emit(rec.track, &rec.slot) {
		rec.giveBack()
		return nil
	}
	m := rec.emitMessage()
	if s.cfg.Retry.Enabled {
		s.g.inflight.Store(m.CorrelationID(), rec)
	}
	if rec.redelivery() {
		s.redelivers.Add(1)
	}
	if w, ok := out.(trackedWith); ok {
		return w.EmitTrackedWith(ctx, m, rec)
	}
	return out.EmitTracked(ctx, m, rec.done)
}

// A trackedWith is the pipeline's Emitter when it takes, instead of a
// done func, a value whose Done it calls with the outcome: the record,
// allocated anyway, rather than a method value made per record (see
// pipeline's emitter).
type trackedWith interface {
	EmitTrackedWith(ctx context.Context, item Message, done interface{ Done(node.Outcome) }) error
}

// Stop ends Run cleanly: no more polls, the records already polled are
// emitted, and Run returns nil; the pipeline then drains, and Close waits
// for the items in flight so that their offsets are committed. Stop is
// safe to call at any time and more than once; a stopped source stays
// stopped (a later Run returns nil at once).
func (s *Source) Stop() { s.stopFunc() }

func (s *Source) setDrain() {
	s.mu.Lock()
	s.drain = true
	s.mu.Unlock()
}

// Close commits what settled and closes the client, which leaves the
// group. After a Run ended by Stop it first waits, up to DrainTimeout, for
// the items in flight to settle. The commit and the leave are bounded by
// CloseTimeout each; a client whose leave got no answer in time closes in
// the background, and Close returns.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	sess, drain := s.sess, s.drain
	s.sess, s.drain = nil, false
	s.mu.Unlock()
	var err error
	if sess != nil {
		err = sess.close(ctx, drain)
	}
	// The guard is closed even with no session: a Run whose rejoin
	// failed left none, and the copies' client and the crash ledger are
	// still open.
	return errors.Join(err, s.closeGuard())
}

// Redelivered returns how many records the source emitted that it had
// emitted before and whose items did not settle (the run ended first, or
// failed because of them).
func (s *Source) Redelivered() int64 { return s.redelivers.Load() }

// redelivery reports whether r was emitted before and its item did not
// settle: an earlier emit of it in this process ended unsettled, or it is
// the copy that the poison guard made of a record that failed a run (a
// copy in the topic itself carries no due time; a tier copy, of a record
// handed off, does, and its item settled).
func (r *record) redelivery() bool {
	return r.src.reads.before(r.key()) > 0 || (r.g.copied().ok && r.g.copied().due.IsZero())
}

// A topicPartitionOffset names one record.
type topicPartitionOffset struct {
	topicPartition
	offset int64
}

// readCounts counts, per record, the earlier emits of it that did not
// settle, so that Message.Deliveries counts the reads of this source.
type readCounts struct {
	mu     sync.Mutex
	counts map[topicPartitionOffset]int
	// n is len(counts), read without mu: most runs fail no record, and
	// then every record's before and settled return at once.
	n atomic.Int64
}

// maxReadCounts bounds readCounts; past it, it starts afresh.
const maxReadCounts = 100_000

func (r *readCounts) before(k topicPartitionOffset) int {
	if r.n.Load() == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[k]
}

func (r *readCounts) failed(k topicPartitionOffset) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) >= maxReadCounts {
		clear(r.counts)
	}
	r.counts[k]++
	r.n.Store(int64(len(r.counts)))
}

func (r *readCounts) settled(k topicPartitionOffset) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.counts, k)
	r.n.Store(int64(len(r.counts)))
}

// A record is one record polled, from its poll to its outcome.
type record struct {
	src   *Source
	sess  *session
	track *partitionTrack
	// slot is the record's entry in its partition's offset tracker.
	slot  trackEntry
	kr    *kgo.Record
	ended atomic.Bool
	g     recordGuard
	// tiered is set once a tier copy of the record (a broker retry's, a
	// hand-off's) is acked: a later try of the write (the engine retries a
	// batch's write whole when another record's copy failed) skips the
	// record rather than store a second copy, and done settles the record
	// whatever its item's outcome, its copy standing in for it.
	tiered atomic.Bool
	// copyMu lets one write of the record at a time copy it to a tier
	// (retrier.copyOnce, Message.HandOff), so that two at once store one
	// copy: the second finds tiered set.
	copyMu sync.Mutex
	// unwritten is set when the source's DeadLetter sink took the item
	// and wrote the record nowhere, as it was gone (retrySink): its
	// next reader reads it again, so its settling must not let a commit
	// take it (Close's last commits run after the session's context
	// ended, when a record still in flight is gone).
	unwritten atomic.Bool
}

func (r *record) key() topicPartitionOffset {
	return topicPartitionOffset{r.track.tp, r.kr.Offset}
}

// gone reports whether r's session closed or its partition is no longer
// the source's to settle: the partition's next reader reads r again. (A
// closed session's last commits may still take r once it settles: a
// hand-off refuses r, and the DeadLetter sink, which then writes r
// nowhere, keeps its item's settling from the tracker: see retrySink.)
func (r *record) gone() bool {
	return r.sess.ctx.Err() != nil || r.sess.tracker.gone(r.track)
}

// beginCopy registers a copy of r (a broker retry's, a hand-off's) as
// under way, unless r is gone (see gone): a revoke then waits for it
// before it takes its commit (session.waitCopies). endCopy must follow a
// true, with whether the copy was stored.
func (r *record) beginCopy() bool {
	return r.sess.ctx.Err() == nil && r.sess.tracker.beginCopy(r.track)
}

// endCopy ends the copy beginCopy registered; a stored copy settles r in
// the offset tracker at once (offsetTracker.endCopy).
func (r *record) endCopy(stored bool) {
	r.sess.tracker.endCopy(r.track, &r.slot, stored)
}

// message returns the Message that r emits.
func (r *record) message() Message {
	kr := r.kr
	m := Message{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value,
		Timestamp: kr.Timestamp, r: r}
	if len(kr.Headers) > 0 {
		m.Headers = make([]Header, len(kr.Headers))
		for i, h := range kr.Headers {
			m.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return m
}

// done is the EmitTracked callback. It runs once per item on an engine
// goroutine, and only updates the tracker.
func (r *record) done(o node.Outcome) {
	if !r.ended.CompareAndSwap(false, true) {
		return
	}
	if r.tiered.Load() {
		// Its tier copy is stored and stands in for it, whatever the
		// item's outcome (a batch whose write failed on another record,
		// a run that failed): it settles, and is neither counted by the
		// poison guard nor emitted again, each of which would deliver it
		// once more. (The tracker settled it as the copy was acked.)
		r.finish(true)
		return
	}
	if r.src.rejected(r, o) {
		return // the poison guard settles it (poison.go)
	}
	if o == node.Failed && r.sess.requeue(r) {
		return // emitted again by the Run going on
	}
	settled := false
	switch o {
	case node.Delivered, node.Filtered, node.Skipped, node.HandedOff:
		settled = true
	case node.DeadLettered:
		// Not when the DeadLetter sink wrote the record nowhere because
		// it was gone: no commit may take it.
		settled = !r.unwritten.Load()
	}
	r.finish(settled)
}

// Done is done, for the pipeline's EmitTrackedWith (see trackedWith).
func (r *record) Done(o node.Outcome) { r.done(o) }

// finish ends r, emitted, settled or not.
func (r *record) finish(settled bool) {
	r.endCrash(settled)
	if r.src.cfg.Retry.Enabled {
		r.src.g.inflight.CompareAndDelete(r.emitted().CorrelationID(), r)
	}
	if settled {
		r.src.reads.settled(r.key())
	} else {
		r.src.reads.failed(r.key())
	}
	r.sess.tracker.end(r.track, &r.slot, settled)
	if settled {
		// Counted after the tracker knows it settled: the commit this
		// count may wake must find this record among what is due, not
		// miss it and wait for the next CommitEvery or CommitInterval.
		r.sess.settle()
	}
	r.sess.release()
}

// giveBack ends r, polled and not emitted, unsettled: the next reader of
// its partition reads it.
func (r *record) giveBack() {
	if r.ended.CompareAndSwap(false, true) {
		r.endCrash(false)
		r.sess.tracker.end(r.track, &r.slot, false)
		r.sess.release()
	}
}
