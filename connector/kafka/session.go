package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/resilience"
)

// A session is one client of a source, from Open to Close: one member of
// the group, with the offsets of what it polled.
type session struct {
	src     *Source
	cl      *kgo.Client
	tracker *offsetTracker

	// commitMu orders commits: a revoke's commit never crosses a
	// periodic one of the same partitions.
	commitMu sync.Mutex

	// held counts the records polled and not ended; freed is signalled
	// when it falls.
	held  atomic.Int64
	freed chan struct{}
	ran   atomic.Bool

	// ctx ends when the session closes: it ends the committer and a
	// revoke's wait.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// lostCtx ends, with the error as its cause, when a broker closed a
	// connection of the client (see lossHook).
	lostCtx context.Context
	lose    context.CancelCauseFunc

	// refusedCtx ends, with the error as its cause, when the group
	// refused a commit for a reason that retrying does not change (see
	// refusedCommit): Run fails with it rather than stall.
	refusedCtx context.Context
	refuse     context.CancelCauseFunc

	// settled counts the records settled since the last commit; nudge
	// wakes the committer once it reaches CommitEvery.
	settled atomic.Int64
	nudge   chan struct{}

	// closing is Close's context, bounded by CloseTimeout, once Close
	// began: the revoke of the group's leave commits within it, not
	// within a CloseTimeout of its own. abandoned is set when Close
	// returned before the client closed (see close): the client's late
	// callbacks then touch nothing of the source.
	closing   atomic.Pointer[context.Context]
	abandoned atomic.Bool
	// closeBegun is set when Close begins, before its drain; revokeErrs
	// are the errors of the revokes' commits since, guarded by revokeMu
	// (not commitMu, which a revoke of an abandoned client may hold).
	closeBegun atomic.Bool
	revokeMu   sync.Mutex
	revokeErrs []error

	// again holds the records whose item ended Failed while a Run went
	// on (a blameless failure: the engine counts on the source to deliver
	// the item again), for the Run's goroutine to emit again; againOpen
	// is set while a Run goes on. wake ends the poll under way; nil
	// between polls.
	againMu   sync.Mutex
	againOpen bool
	again     []*record
	wake      context.CancelCauseFunc
}

// openSession starts a client for s's config and checks the topics.
func (s *Source) openSession(ctx context.Context) (*session, error) {
	sess := &session{src: s, tracker: newOffsetTracker(), freed: make(chan struct{}, 1), nudge: make(chan struct{}, 1)}
	sess.ctx, sess.cancel = context.WithCancel(context.Background())
	// With StartAtEnd, a new group's start is committed as soon as a
	// partition's first record arrives: were it left to the first record
	// that settles, a run that ends before one does would leave no commit,
	// and the next Run would start at the end again, past the records
	// this one read and did not settle.
	sess.tracker.commitStart = s.cfg.StartAtEnd
	sess.tracker.onStart = sess.nudgeCommit
	sess.lostCtx, sess.lose = context.WithCancelCause(sess.ctx)
	sess.refusedCtx, sess.refuse = context.WithCancelCause(sess.ctx)
	reset := kgo.NewOffset().AtStart()
	if s.cfg.StartAtEnd {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.topics()...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.OnPartitionsAssigned(sess.assigned),
		kgo.OnPartitionsRevoked(sess.revoked),
		kgo.OnPartitionsLost(sess.lost),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		// Kafka's rule of thumb, a third of the session (franz-go's 3 s
		// is too long for a short session).
		kgo.HeartbeatInterval(min(3*time.Second, s.cfg.SessionTimeout/3)),
		kgo.DialTimeout(s.cfg.DialTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(reset),
		kgo.FetchMaxWait(fetchWait),
		kgo.WithHooks(lossHook{sess}),
	}
	if s.cfg.Dial != nil {
		opts = append(opts, kgo.Dialer(s.cfg.Dial))
	}
	opts = append(opts, s.tierOpts()...)
	opts = append(opts, s.opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		sess.cancel()
		return nil, resilience.MarkPermanent(fmt.Errorf("kafka: client: %w", err))
	}
	sess.cl = cl
	if err := sess.check(ctx); err != nil {
		sess.cancel()
		cl.Close()
		return nil, err
	}
	sess.wg.Add(1)
	go sess.committer()
	return sess, nil
}

// check reaches the cluster and checks that every topic exists.
func (sess *session) check(ctx context.Context) error {
	cfg := &sess.src.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	for _, topic := range sess.src.topics() {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, sess.cl)
	if err != nil {
		if ctx.Err() != nil || connectionLost(err) {
			return resilience.MarkTransient(fmt.Errorf("kafka: connect to %v: %w: %w", cfg.Brokers, ErrConnectionLost, err))
		}
		return classify(fmt.Errorf("kafka: connect to %v: %w", cfg.Brokers, err))
	}
	for _, t := range resp.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case err == nil:
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return resilience.MarkPermanent(fmt.Errorf("kafka: topic %q: %w", name, ErrUnknownTopic))
		default:
			return classify(fmt.Errorf("kafka: topic %q: %w", name, err))
		}
	}
	return nil
}

// track registers a polled record; nil when its partition is no longer
// the source's.
func (sess *session) track(kr *kgo.Record) *record {
	if recs := sess.trackPoll([]*kgo.Record{kr}); len(recs) == 1 {
		return recs[0]
	}
	return nil
}

// trackPoll registers the records of a poll, under one lock taking, and
// returns those it tracks, in order: a record whose partition is no
// longer the source's is left out.
func (sess *session) trackPoll(krs []*kgo.Record) []*record {
	recs := make([]*record, len(krs))
	for i, kr := range krs {
		recs[i] = &record{src: sess.src, sess: sess, kr: kr}
		recs[i].slot.offset, recs[i].slot.epoch = kr.Offset, kr.LeaderEpoch
	}
	sess.tracker.addEntries(len(recs), func(i int) (string, int32, *trackEntry) {
		return krs[i].Topic, krs[i].Partition, &recs[i].slot
	}, func(i int, tr *partitionTrack) {
		recs[i].track = tr
	})
	out := recs[:0]
	for _, r := range recs {
		if r.track != nil {
			out = append(out, r)
		}
	}
	clear(recs[len(out):])
	sess.held.Add(int64(len(out)))
	return out
}

// openAgain starts taking records to emit again, as a Run starts.
func (sess *session) openAgain() {
	sess.againMu.Lock()
	sess.againOpen = true
	sess.againMu.Unlock()
}

// closeAgain stops taking records to emit again, as a Run ends, and
// gives back, unsettled, those not emitted yet: the next reader reads
// them.
func (sess *session) closeAgain() {
	sess.againMu.Lock()
	sess.againOpen = false
	recs := sess.again
	sess.again = nil
	sess.againMu.Unlock()
	for _, r := range recs {
		r.giveBack()
	}
}

// requeue takes r, whose item ended Failed, to emit again, and reports
// whether it did: only while a Run goes on (otherwise the run ended
// first, and r stays unsettled for the next reader) and r's partition is
// still the source's. r stays held; its delivery counts as one that did
// not settle.
func (sess *session) requeue(r *record) bool {
	sess.againMu.Lock()
	defer sess.againMu.Unlock()
	if !sess.againOpen || !sess.tracker.unemit(r.track, &r.slot) {
		return false
	}
	r.endCrash(false)
	r.g.crash = nil
	if r.src.cfg.Retry.Enabled {
		r.src.g.inflight.CompareAndDelete(r.emitted().CorrelationID(), r)
	}
	r.src.reads.failed(r.key())
	r.g.rejected.Store(nil)
	r.ended.Store(false)
	sess.again = append(sess.again, r)
	if sess.wake != nil {
		sess.wake(errAgain)
	}
	select {
	case sess.freed <- struct{}{}:
	default:
	}
	return true
}

// takeAgain takes the records to emit again, in offset order per
// partition.
func (sess *session) takeAgain() []*record {
	sess.againMu.Lock()
	recs := sess.again
	sess.again = nil
	sess.againMu.Unlock()
	sort.SliceStable(recs, func(i, j int) bool {
		a, b := recs[i].track.tp, recs[j].track.tp
		if a != b {
			if a.topic != b.topic {
				return a.topic < b.topic
			}
			return a.partition < b.partition
		}
		return recs[i].kr.Offset < recs[j].kr.Offset
	})
	return recs
}

// errAgain ends a poll when a record is to be emitted again, so that the
// Run's goroutine emits it.
var errAgain = errors.New("kafka: a record is to be emitted again")

// settle counts one record settled, and wakes the committer once
// CommitEvery did since the last commit.
func (sess *session) settle() {
	if sess.settled.Add(1) >= int64(sess.src.cfg.CommitEvery) {
		sess.nudgeCommit()
	}
}

// nudgeCommit wakes the committer.
func (sess *session) nudgeCommit() {
	select {
	case sess.nudge <- struct{}{}:
	default:
	}
}

// release counts one held record ended.
func (sess *session) release() {
	sess.held.Add(-1)
	sess.roomFreed()
}

// roomFreed tells a Run that waits for room to look again.
func (sess *session) roomFreed() {
	select {
	case sess.freed <- struct{}{}:
	default:
	}
}

// committer commits what settled every CommitInterval until the session
// closes.
func (sess *session) committer() {
	defer sess.wg.Done()
	t := sess.src.cfg.Clock.NewTicker(sess.src.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-sess.ctx.Done():
			return
		case <-t.Chan():
			_ = sess.commit(sess.ctx)
		case <-sess.nudge:
			_ = sess.commit(sess.ctx)
		}
	}
}

// commit commits the offsets that moved since the last commit.
func (sess *session) commit(ctx context.Context) error {
	sess.commitMu.Lock()
	defer sess.commitMu.Unlock()
	return sess.commitLocked(ctx, sess.tracker.due())
}

// commitLocked commits cs, under commitMu, and records which partitions
// the group took.
func (sess *session) commitLocked(ctx context.Context, cs []commitOffset) error {
	sess.settled.Store(0)
	if len(cs) == 0 {
		return nil
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, c := range cs {
		if offsets[c.tp.topic] == nil {
			offsets[c.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[c.tp.topic][c.tp.partition] = kgo.EpochOffset{Epoch: c.epoch, Offset: c.offset}
	}
	var (
		rerr error
		ok   = map[topicPartition]bool{}
	)
	sess.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					rerr = errors.Join(rerr, fmt.Errorf("partition %d: %w", p.Partition, err))
					continue
				}
				ok[topicPartition{t.Topic, p.Partition}] = true
			}
		}
	})
	done := cs[:0:0]
	for _, c := range cs {
		if ok[c.tp] {
			done = append(done, c)
		}
	}
	sess.tracker.committed(done)
	if len(done) > 0 {
		// Committed records no longer take room (see Run).
		select {
		case sess.freed <- struct{}{}:
		default:
		}
	}
	if rerr != nil {
		err := classify(fmt.Errorf("kafka: commit offsets of %s for group %s: %w", sess.src.cfg.Topic, sess.src.cfg.Group, rerr))
		switch {
		case refusedCommit(rerr):
			sess.refuse(resilience.MarkPermanent(err))
		case fencedCommit(rerr):
			// The group dropped the member (its heartbeats went
			// unanswered, as on a silent link): no commit of this
			// client succeeds again, and a Run that waits for room
			// polls no more, so it would never see the group's error.
			// The session is lost: the Run ends, and its restart
			// rejoins and reads again from the committed offsets.
			// The cause wraps the broker's error unclassified: classify
			// marks it permanent (no retry of this commit helps), and a
			// permanent mark anywhere in the chain would outweigh the
			// transient one Run gives the lost session.
			sess.lose(fmt.Errorf("%w: kafka: commit offsets of %s for group %s: %w", ErrConnectionLost, sess.src.cfg.Topic, sess.src.cfg.Group, rerr))
		}
		return err
	}
	return nil
}

// refusedCommit reports whether a commit failed for a reason that no
// retry changes: the group or topic is not the client's to commit, or the
// commit itself is malformed. Other failures (a rebalance under way, a
// coordinator moving) pass, and the next commit takes their offsets; a
// member the group dropped loses its session (fencedCommit).
func refusedCommit(err error) bool {
	for _, target := range []error{kerr.GroupAuthorizationFailed, kerr.TopicAuthorizationFailed,
		kerr.OffsetMetadataTooLarge, kerr.InvalidCommitOffsetSize, kerr.InvalidGroupID} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// fencedCommit reports whether a commit failed because the group no
// longer knows the member or its generation: the group dropped it, and
// the member's offsets can be committed only by a new session.
func fencedCommit(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.FencedInstanceID)
}

// assigned is the group's OnPartitionsAssigned: tracks for the new
// partitions.
func (sess *session) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for topic, ps := range m {
		sess.tracker.assign(topic, ps)
	}
}

// revoked is the group's OnPartitionsRevoked: it waits, up to
// RevokeTimeout, for the revoked partitions' records in flight to
// settle, commits what settled, and lets the partitions go.
func (sess *session) revoked(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	sess.commitMu.Lock()
	defer sess.commitMu.Unlock()
	if sess.abandoned.Load() {
		return // Close returned; a later Run has a session of its own
	}
	var trs []*partitionTrack
	for topic, ps := range m {
		trs = append(trs, sess.tracker.revoke(topic, ps)...)
	}
	sess.src.dropHeld(sess, m)
	if len(trs) == 0 {
		return
	}
	cfg := &sess.src.cfg
	timer := cfg.Clock.NewTimer(cfg.RevokeTimeout)
	defer timer.Stop()
wait:
	for _, tr := range trs {
		for {
			ch, idle := sess.tracker.idle(tr)
			if idle {
				break
			}
			select {
			case <-ch:
			case <-timer.Chan():
				break wait
			case <-sess.ctx.Done():
				break wait
			case <-ctx.Done():
				break wait
			}
		}
	}
	sess.waitCopies(ctx, trs)
	base := context.Background()
	closing := sess.closing.Load()
	if closing != nil {
		base = *closing
	}
	cctx, cancel := context.WithTimeout(base, cfg.CloseTimeout)
	defer cancel()
	if cerr := sess.commitLocked(cctx, sess.tracker.dueOf(trs)); cerr != nil && sess.closeBegun.Load() {
		sess.revokeMu.Lock()
		sess.revokeErrs = append(sess.revokeErrs, cerr)
		sess.revokeMu.Unlock()
	}
	sess.tracker.retire(trs)
	// Their records settled and not committed took room, which Run may
	// wait for: nothing else would say it came back when the commit
	// failed.
	sess.roomFreed()
}

// waitCopies ends the revoke's wait for the records of trs: no copy of
// them begins from now on (they are gone), and it waits, up to copyTimeout
// on the source's clock (each copy's own bound), for the copies under way,
// whose records the wait for records in flight could not see settle
// before RevokeTimeout. A copy stored settles its record (endCopy), which
// the revoke's commit then takes; without the wait, the commit would leave
// the record to the partition's next owner while its copy is stored too
// (a third delivery). A copy whose outcome is unknown leaves its record
// uncommitted: at least once.
func (sess *session) waitCopies(ctx context.Context, trs []*partitionTrack) {
	var chs []<-chan struct{}
	for _, tr := range trs {
		if ch := sess.tracker.sealCopies(tr); ch != nil {
			chs = append(chs, ch)
		}
	}
	if len(chs) == 0 {
		return
	}
	timer := sess.src.cfg.Clock.NewTimer(copyTimeout)
	defer timer.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-timer.Chan():
			return
		case <-ctx.Done():
			return
		}
	}
}

// lost is the group's OnPartitionsLost: the partitions are no longer the
// source's, and nothing of them is committed.
func (sess *session) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	sess.commitMu.Lock()
	defer sess.commitMu.Unlock()
	if sess.abandoned.Load() {
		return // Close returned; a later Run has a session of its own
	}
	for topic, ps := range m {
		sess.tracker.retire(sess.tracker.revoke(topic, ps))
	}
	sess.src.dropHeld(sess, m)
	// Their records settled and not committed took room (see revoked).
	sess.roomFreed()
}

// close ends the session: after a drain it waits, up to DrainTimeout, for
// the items in flight; then it commits what settled and closes the
// client, which leaves the group.
func (sess *session) close(ctx context.Context, drain bool) error {
	cfg := &sess.src.cfg
	// Close answers for the partitions held now: at its end, whatever of
	// them settled and was not committed is its error, whichever commit
	// (its own, a revoke's during the drain or after, the leave's) failed
	// to take it.
	holding := sess.tracker.held()
	sess.closeBegun.Store(true)
	if drain {
		timer := cfg.Clock.NewTimer(cfg.DrainTimeout)
	wait:
		for sess.tracker.inFlight() > 0 {
			select {
			case <-sess.freed:
			case <-timer.Chan():
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		timer.Stop()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CloseTimeout)
	defer cancel()
	sess.closing.Store(&cctx)
	// A record whose failed run is being settled (its copy or dead letter
	// on its way, poison.go) settles before the last commit, and before
	// the session's context ends, which would cut its copy short.
	sess.src.waitSettling(cctx)
	// The committer stops, and a revoke waiting for records in flight
	// (a rebalance under way) commits what settled and returns, as does
	// the revoke of the leave below: Close waits for nothing more.
	sess.cancel()
	sess.wg.Wait()
	err := sess.commit(cctx)
	// The client leaves the group and closes within a CloseTimeout of
	// its own, in which the revoke of the leave commits once more what
	// is due: what settled after the commit above, and, when the broker
	// answered that commit late, what it held. A broker answers a
	// connection's requests in turn, so a commit it has not answered
	// holds the leave's request too, and the client waits for a request
	// it wrote until the broker answers or the client's request timeout
	// (10 s) passes: Close does not wait for that. The client then closes
	// in the background; the member stays in the group until its session
	// times out (SessionTimeout), and its partitions wait that long for
	// another member.
	lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CloseTimeout)
	defer lcancel()
	sess.closing.Store(&lctx)
	sess.cl.AllowRebalance()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		sess.cl.Close()
	}()
	abandoned := false
	select {
	case <-closed:
	case <-lctx.Done():
		sess.abandoned.Store(true)
		abandoned = true
	}
	sess.revokeMu.Lock()
	failed := err != nil || len(sess.revokeErrs) > 0
	sess.revokeMu.Unlock()
	left, starts := sess.tracker.settledUncommitted(holding)
	if !failed {
		// A start offset that no commit took was in no commit that
		// failed: none was due (the group had one).
		starts = nil
	}
	if len(left) == 0 && len(starts) == 0 {
		// Everything that settled is committed, whichever commit took
		// it: an error of an earlier one (a late answer) changed nothing.
		return nil
	}
	sess.revokeMu.Lock()
	err = errors.Join(append([]error{err}, sess.revokeErrs...)...)
	sess.revokeMu.Unlock()
	if len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("kafka: records of group %s settled and were not committed, in partitions %v; the group's next reader reads them again", cfg.Group, left))
	}
	if len(starts) > 0 {
		err = errors.Join(err, fmt.Errorf("kafka: the start offsets of group %s, in partitions %v, may not be committed (a commit failed); with StartAtEnd, if the group had none, its next reader starts at the end", cfg.Group, starts))
	}
	if abandoned {
		err = errors.Join(err, fmt.Errorf("kafka: close the client of group %s: it did not close within CloseTimeout (%v) (its leave, or the commit made as it leaves, got no answer); it closes in the background: %w",
			cfg.Group, cfg.CloseTimeout, context.Cause(lctx)))
	}
	return err
}

// A lossHook tells the session when a broker closed one of the client's
// connections: the broker went away, or the network between them cut the
// connection. The client would dial again by itself; the source instead
// ends its run with ErrConnectionLost, as the other connectors do, so
// that node restart rejoins the group afresh and the pipeline's
// resilience sees the loss. A connection the client closes itself (an
// idle one, or at Close) reads net.ErrClosed, which is not a loss.
type lossHook struct{ sess *session }

func (h lossHook) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	h.check(meta, err)
}

func (h lossHook) OnBrokerWrite(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	h.check(meta, err)
}

func (h lossHook) check(meta kgo.BrokerMetadata, err error) {
	if err == nil || h.sess.ctx.Err() != nil || !closedByPeer(err) {
		return
	}
	h.sess.lose(fmt.Errorf("kafka: broker %d at %s:%d closed the connection: %w: %w", meta.NodeID, meta.Host, meta.Port, ErrConnectionLost, err))
}

// closedByPeer reports whether err is the other end closing a connection.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
