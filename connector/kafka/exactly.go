package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// DefaultTransactionTimeout is how long the brokers let a transaction of
// an exactly-once pipeline stay open before they abort it.
const DefaultTransactionTimeout = 60 * time.Second

// An ExactlyOnceConfig configures [NewExactlyOnce]: a consume → produce
// pipeline whose outputs and input offsets are committed in one Kafka
// transaction. Brokers, Topic, Group, TransactionalID and Record are
// required.
type ExactlyOnceConfig[T any] struct {
	// Brokers are the seed brokers, as host:port. Required.
	Brokers []string
	// Topic is the topic consumed. Required.
	Topic string
	// Group is the consumer group. Required.
	Group string
	// TransactionalID names the producer of this process across its
	// restarts: a process that starts with the TransactionalID of one
	// that died fences the dead one and aborts the transaction it left
	// open. Each process of the group needs its own, the same at every
	// restart (such as the group and the host's name). Required.
	TransactionalID string
	// InstanceID, when set, makes this process a static member of the
	// group: a restarted process with the same id takes its place at
	// once, without a rebalance, instead of after SessionTimeout. Each
	// process needs its own.
	InstanceID string
	// Output is the topic of every output record whose Topic is empty.
	Output string
	// Record turns an item into the output record (its Key, Value,
	// Headers and, when set, Topic and Timestamp). An error fails the item
	// permanently, and so aborts its epoch's transaction. Required.
	Record func(item T) (*kgo.Record, error)
	// CommitInterval is, on Clock, how long one epoch takes in records:
	// the source stops emitting at its end, and commits the transaction
	// once every record emitted in it settled. It must be well within the
	// group's rebalance timeout (60s), since a rebalance waits for the
	// epoch's end. Default [DefaultCommitInterval].
	CommitInterval time.Duration
	// MaxInFlight is the most records emitted and not settled; polling
	// pauses at it. Default [DefaultMaxInFlight].
	MaxInFlight int
	// AckTimeout bounds, on Clock, the wait for one output record's ack;
	// past it the record's outcome is unknown and its epoch aborts.
	// Default [DefaultAckTimeout].
	AckTimeout time.Duration
	// MaxRecordBytes is the largest output record. Default
	// [DefaultMaxRecordBytes].
	MaxRecordBytes int
	// TransactionTimeout is how long the brokers let a transaction stay
	// open (a process that dies mid-epoch leaves one, aborted past it or
	// when its TransactionalID comes back). An epoch open longer, as
	// when a record is held, is aborted by the brokers: its outputs
	// produced after fail transient and blameless, and the source's Run
	// fails transient, for a node restart to open a new client. Default
	// [DefaultTransactionTimeout].
	TransactionTimeout time.Duration
	// SessionTimeout is how long the group coordinator waits for a
	// heartbeat before it gives the member's partitions to others.
	// Default [DefaultSessionTimeout].
	SessionTimeout time.Duration
	// DialTimeout bounds connecting to a broker. Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds, in real time, the transaction's end at Close,
	// and then, once more, the client's leave and close; a client not
	// closed in that time closes in the background. Default
	// [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// Dial, when set, opens the connections to the brokers in place of a
	// net.Dialer.
	Dial func(ctx context.Context, network, host string) (net.Conn, error)
	// Clock is what the epochs and the acks wait on; default the real
	// clock.
	Clock clockwork.Clock
}

// Validate reports every problem of c, joined, each a [*ConfigError]; nil
// when c is valid. NewExactlyOnce calls it.
func (c ExactlyOnceConfig[T]) Validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if c.Topic == "" {
		add("Topic", `""`, "required: the topic to consume")
	}
	if c.Group == "" {
		add("Group", `""`, "required: the consumer group")
	}
	if c.TransactionalID == "" {
		add("TransactionalID", `""`, "required: the producer's name across restarts, one per process")
	}
	if c.Record == nil {
		add("Record", "nil", "required: it turns an item into the output record")
	}
	if c.CommitInterval < 0 {
		add("CommitInterval", c.CommitInterval, "must not be negative")
	}
	if c.MaxInFlight < 0 {
		add("MaxInFlight", c.MaxInFlight, "must not be negative")
	}
	if c.TransactionTimeout < 0 || c.TransactionTimeout > 0 && c.TransactionTimeout < time.Second {
		add("TransactionTimeout", c.TransactionTimeout, "must be 0 (the default) or at least a second")
	}
	if c.SessionTimeout < 0 {
		add("SessionTimeout", c.SessionTimeout, "must not be negative")
	}
	errs = append(errs, pubProblems(c.Brokers, c.AckTimeout, PubRetry{}, c.MaxRecordBytes, c.DialTimeout, c.CloseTimeout)...)
	return errors.Join(errs...)
}

// An ExactlyOnce is a consume → produce pipeline's two ends that share
// one transactional client: [ExactlyOnce.Source] emits the records of
// Topic, and [ExactlyOnce.Sink] produces each item's output record inside
// the current transaction. The offsets of the records consumed are
// committed in the same transaction as the records produced from them, so
// a consumer of the output that reads committed records only (Kafka's
// read_committed isolation) sees each input's outputs once, however often
// the process dies.
//
// The source works in epochs: it begins a transaction, emits records for
// CommitInterval (on Clock), stops emitting, and waits for every record
// emitted in the epoch to settle, in any order (Delivered, Filtered,
// Skipped, DeadLettered, HandedOff). Then it commits the transaction, with
// the offsets after the records it polled. A record of the epoch that
// ends Failed or Rejected, or an output whose produce is unknown, aborts
// the transaction instead: its outputs are discarded, and every record of
// the epoch is read again. A rebalance waits for the epoch's end (polls
// block it until the transaction ended); a partition lost meanwhile
// aborts the epoch.
//
// What lies outside the transaction is not exactly once: a dead letter
// (the pipeline's dead-letter sink writes it when the item fails, even if
// the epoch aborts later, so an aborted epoch's dead letters may come
// again), and any side effect of a transform. The output topic's
// consumers must read committed records (kgo.FetchIsolationLevel with
// kgo.ReadCommitted(), isolation.level=read_committed): one that reads
// uncommitted ones also sees aborted outputs.
//
// Build the pipeline with Source as its only source and Sink as its only
// sink of output records: an item written to Sink must derive from a
// record of the same ExactlyOnce's Source.
type ExactlyOnce[T any] struct {
	cfg ExactlyOnceConfig[T]
	src *TransactSource
	snk *TransactSink[T]
}

// NewExactlyOnce returns the two ends of an exactly-once pipeline for cfg,
// or every problem of cfg joined, each a [*ConfigError].
func NewExactlyOnce[T any](cfg ExactlyOnceConfig[T]) (*ExactlyOnce[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = DefaultCommitInterval
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	core := newPubCore(cfg.Brokers, cfg.Output, cfg.AckTimeout, PubRetry{}, cfg.MaxRecordBytes, cfg.DialTimeout, cfg.CloseTimeout, cfg.Dial, cfg.Clock)
	_, identifies := any(*new(T)).(Message)
	src := &TransactSource{core: core, group: cfg.Group, commitInterval: cfg.CommitInterval, maxInFlight: cfg.MaxInFlight, txnTimeout: cfg.TransactionTimeout,
		freed: make(chan struct{}, 1), identifies: identifies, deliveries: map[recordID]int{}}
	src.stopCtx, src.stopFunc = context.WithCancel(context.Background())
	src.options = func() []kgo.Opt {
		opts := core.options()
		opts = append(opts,
			kgo.TransactionalID(cfg.TransactionalID),
			kgo.TransactionTimeout(cfg.TransactionTimeout),
			kgo.ConsumerGroup(cfg.Group),
			kgo.ConsumeTopics(cfg.Topic),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(fetchWait),
			kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(cfg.SessionTimeout),
		)
		if cfg.InstanceID != "" {
			opts = append(opts, kgo.InstanceID(cfg.InstanceID))
		}
		return opts
	}
	e := &ExactlyOnce[T]{cfg: cfg, src: src, snk: &TransactSink[T]{src: src, record: cfg.Record}}
	return e, nil
}

// Source returns the end that consumes Topic.
func (e *ExactlyOnce[T]) Source() *TransactSource { return e.src }

// Sink returns the end that produces the output records.
func (e *ExactlyOnce[T]) Sink() *TransactSink[T] { return e.snk }

// A TransactSource is the consuming end of an [ExactlyOnce]: a
// [node.Source] of [Message] with Open, Close and Stop, as [Source] has.
type TransactSource struct {
	core           *pubCore
	group          string
	options        func() []kgo.Opt
	commitInterval time.Duration
	maxInFlight    int
	txnTimeout     time.Duration

	// life serializes Open and Close. mu guards sess, which they
	// replace, gen, which each of them moves on, and runCancel, the
	// cancel of the Run under way: a Run begins an epoch only on the
	// session of the gen it started under, so that one still going when
	// Close or Open took the session over (a program's own call; the
	// pipeline calls neither while Run runs) stops, and begins none.
	life      sync.Mutex
	mu        sync.Mutex
	sess      *kgo.GroupTransactSession
	gen       uint64
	runCancel context.CancelCauseFunc
	runDone   chan struct{}

	// epoch is the current epoch's state; the Run goroutine replaces it
	// between epochs, when nothing of the old one is in flight, or, after
	// Close ended an epoch with records still in flight, in a new session.
	epoch atomic.Pointer[epochState]
	freed chan struct{}

	// identifies is true when the sink's items are the Messages emitted
	// (T is Message): a Write then knows its record's epoch by the
	// record and its Deliveries. Otherwise a new epoch does not begin
	// while a record of an ended one is in flight (see [TransactSource.Run]).
	identifies bool
	// dmu guards deliveries, each epoch's emitted and old.
	dmu sync.Mutex
	// deliveries counts the emits of each record not yet committed.
	deliveries map[recordID]int
	// old are the ended epochs that still had records in flight.
	old []*epochState

	stopCtx  context.Context
	stopFunc context.CancelFunc

	committed, aborted, unknown atomic.Int64

	// watches holds each open session's endWatch, by session; stale is
	// the session whose client's own view of the committed offsets may
	// be behind the group's since a commit answered
	// UNKNOWN_SERVER_ERROR (see realign); rewound says an end aborted,
	// so that the client rewound.
	watches sync.Map // *kgo.GroupTransactSession -> *endWatch
	stale   atomic.Pointer[kgo.GroupTransactSession]
	rewound atomic.Bool
	// unended is the session whose last commit's outcome was unknown
	// (the context ended or the connection broke while it was under
	// way): its client keeps the transaction for an abort, and begins
	// none until that abort.
	unended atomic.Pointer[kgo.GroupTransactSession]
}

// An epochState counts one epoch's records.
type epochState struct {
	// inFlight counts the records emitted and not ended.
	inFlight atomic.Int64
	// polled counts the records emitted; tainted is set when one of them
	// did not settle, or an output's produce is unknown. unemitted counts
	// the records of a poll not yet emitted: the transaction's commit
	// would commit their offsets too.
	polled    atomic.Int64
	unemitted atomic.Int64
	tainted   atomic.Bool
	// ended is set, with the client's lock held, before the epoch's
	// transaction ends: no output is admitted into it after.
	ended atomic.Bool
	// begun is when the transaction began, on the real clock the
	// brokers time transactions out on.
	begun time.Time
	// emitted holds each record emitted in the epoch with its
	// Deliveries; guarded by the source's dmu.
	emitted map[recordID]int
}

// live reports whether a record of ep is in flight, or polled and not
// yet emitted.
func (ep *epochState) live() bool { return ep.inFlight.Load() > 0 || ep.unemitted.Load() > 0 }

// A recordID names a record of the cluster.
type recordID struct {
	topic     string
	partition int32
	offset    int64
}

// errStale ends the produce of an output whose record's epoch ended (or
// whose record is not of the open epoch): the transaction it belonged to
// was aborted, and the record is read again.
var errStale = errors.New("kafka: exactly-once: the output's epoch ended")

// admit returns the open epoch that item's output joins, or errStale
// when item's record is of an epoch that ended (its transaction was
// aborted; the record is read again), or an error when no epoch knows
// item. A Message item (T is Message) joins only the epoch that emitted
// it; another item joins the open epoch, as Run begins none while a
// record of an ended one is in flight. The client's lock is held.
func (s *TransactSource) admit(item any) (*epochState, error) {
	ep := s.epoch.Load()
	if ep != nil && ep.ended.Load() {
		ep = nil
	}
	if m, ok := item.(Message); ok && s.identifies {
		id := recordID{m.Topic, m.Partition, m.Offset}
		s.dmu.Lock()
		defer s.dmu.Unlock()
		if ep != nil {
			if d, ok := ep.emitted[id]; ok && d == m.Deliveries {
				return ep, nil
			}
		}
		for _, o := range s.old {
			if d, ok := o.emitted[id]; ok && d == m.Deliveries && o.live() {
				return nil, errStale
			}
		}
		if d, ok := s.deliveries[id]; ok && m.Deliveries >= 1 && m.Deliveries < d {
			return nil, errStale
		}
		return nil, resilience.MarkPermanent(fmt.Errorf("kafka: exactly-once sink: record %s (delivery %d) was not emitted by the ExactlyOnce's source, or its epoch committed: %w",
			m.CorrelationID(), m.Deliveries, ErrNotOpen))
	}
	if ep != nil {
		return ep, nil
	}
	s.dmu.Lock()
	old := false
	for _, o := range s.old {
		old = old || o.live()
	}
	s.dmu.Unlock()
	if old {
		return nil, errStale
	}
	return nil, resilience.MarkPermanent(fmt.Errorf("kafka: exactly-once sink: no transaction open (the source is not running, or the item is not of its records): %w", ErrNotOpen))
}

// Open creates the transactional client, which joins the group; an
// unreachable cluster is transient. Called again without Close, it aborts
// the first session's epoch on that session, ends any Run still running
// on it (see Close), and closes the first client.
func (s *TransactSource) Open(ctx context.Context) error {
	watch := &endWatch{}
	sess, err := kgo.NewGroupTransactSession(append(s.options(), kgo.WithLogger(watch))...)
	if err != nil {
		return resilience.MarkPermanent(fmt.Errorf("kafka: exactly-once client: %w", err))
	}
	s.watches.Store(sess, watch)
	if err := sess.Client().Ping(ctx); err != nil {
		s.watches.Delete(sess)
		sess.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return resilience.MarkTransient(fmt.Errorf("kafka: exactly-once client: no broker answers: %w: %w", ErrConnectionLost, err))
	}
	// Taken after the ping, so that a Close never waits for it.
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	old := s.sess
	s.sess = sess
	running := s.takeOver()
	var ep *epochState
	if old != nil {
		s.core.mu.Lock()
		ep = s.retire()
		s.core.mu.Unlock()
	}
	s.mu.Unlock()
	s.awaitRun(ctx, running)
	if old != nil { // opened twice without a Close: do not leak the first
		if ep != nil {
			ep.tainted.Store(true)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.core.closeTimeout)
			_ = s.end(cctx, old, ep)
			cancel()
		}
		_ = s.closeSession(ctx, old)
	}
	s.core.mu.Lock()
	s.core.cl = sess.Client()
	s.core.mu.Unlock()
	return nil
}

// takeOver ends the Run under way, if any: Close or Open took its
// session; mu is held. It returns a channel closed once that Run
// returned, nil when none ran.
func (s *TransactSource) takeOver() <-chan struct{} {
	s.gen++
	if s.runCancel == nil {
		return nil
	}
	s.runCancel(errTakenOver)
	done := s.runDone
	s.runCancel, s.runDone = nil, nil
	return done
}

// retire takes the open epoch, for Close or Open to end once the Run
// they took over returned: no output joins it after (the client's lock
// is held, as admit holds it). While a record of it is in flight or not
// yet emitted it is aborted, and kept in old, so that their outputs are
// stale: its end would otherwise commit the offsets of records whose
// outputs were refused. An epoch not live then stays so: takeOver
// cancelled the Run's poll first, and a cancelled poll returns no
// records.
func (s *TransactSource) retire() *epochState {
	ep := s.epoch.Swap(nil)
	if ep == nil || !ep.live() {
		return ep
	}
	ep.tainted.Store(true)
	s.dmu.Lock()
	s.old = append(s.old, ep)
	s.dmu.Unlock()
	return ep
}

// awaitRun waits, within CloseTimeout, for the Run that takeOver ended
// to return, so that the epoch's end and the client's close do not run
// beside its poll (the client does not allow that). A Close called from
// the emitter, on Run's own goroutine, waits the whole CloseTimeout.
func (s *TransactSource) awaitRun(ctx context.Context, done <-chan struct{}) {
	if done == nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.core.closeTimeout)
	defer cancel()
	select {
	case <-done:
	case <-wctx.Done():
	}
}

// errRunning refuses a Run while another runs: both would poll the one
// client, and each end the other's epoch.
var errRunning = resilience.MarkPermanent(errors.New("kafka: exactly-once source: Run called while another Run of it runs"))

// errTakenOver ends a Run whose source was closed, or opened again, while
// it ran.
var errTakenOver = fmt.Errorf("kafka: the exactly-once source was closed or opened again while it ran: %w", ErrNotOpen)

// Run emits records epoch by epoch until ctx is done (it returns the
// cause) or Stop is called (it returns nil). The epoch under way when
// Run returns is ended by Close: committed when every record of it
// settled, else aborted. A Close or Open called while Run runs ends it:
// it stops polling, begins no epoch, and returns an error matching
// [ErrNotOpen]; the epoch is ended by that Close or Open. One Run at a
// time: a second, while one runs, returns a permanent error at once.
func (s *TransactSource) Run(ctx context.Context, out node.Emitter[Message]) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	sess, gen := s.sess, s.gen
	if sess != nil && s.runCancel != nil {
		s.mu.Unlock()
		return errRunning
	}
	var left *epochState
	done := make(chan struct{})
	if sess != nil {
		s.runCancel, s.runDone = cancel, done
		left = s.epoch.Swap(nil)
	}
	s.mu.Unlock()
	if sess == nil {
		return ErrNotOpen
	}
	defer close(done)
	defer func() {
		s.mu.Lock()
		if s.gen == gen {
			s.runCancel, s.runDone = nil, nil
		}
		s.mu.Unlock()
		if errors.Is(context.Cause(ctx), errTakenOver) {
			// A poll may have blocked the rebalance that the client's
			// close, under way, waits for.
			sess.AllowRebalance()
		}
		if err != nil && errors.Is(context.Cause(ctx), errTakenOver) && !errors.Is(err, errTakenOver) {
			// Whatever this Run was doing when Close or Open took
			// its session over, that is why it ended.
			err = errors.Join(errTakenOver, err)
		}
	}()
	if ep := left; ep != nil {
		// Run again after a run that failed: the epoch it left is
		// aborted, its records read again.
		ep.tainted.Store(true)
		if err := s.end(ctx, sess, ep); err != nil {
			return err
		}
	}
	if s.unended.CompareAndSwap(sess, nil) {
		// The last commit's outcome was unknown: end its transaction
		// with the abort the client kept it for (it reloads the
		// producer ID, which aborts the transaction if the broker still
		// has it open, and leaves it committed if the broker committed
		// it); realign then sets the client to the group's offsets.
		_, err := sess.End(ctx, kgo.TryAbort)
		sess.AllowRebalance()
		if err != nil {
			s.unended.Store(sess)
			return classify(fmt.Errorf("kafka: exactly-once: abort the transaction whose commit's outcome was unknown: %w", err))
		}
	}
	// A Run that failed at an epoch's end may have left the client
	// rewound behind the group's offsets (see realign).
	s.rewound.Store(false)
	if err := s.realign(ctx, sess); err != nil {
		return err
	}
	for {
		if !s.identifies {
			// An output of an ended epoch's record, written now, could
			// not be told from one of the new epoch.
			if err := s.waitOld(ctx); err != nil || s.stopCtx.Err() != nil {
				return err
			}
		}
		ep := &epochState{emitted: map[recordID]int{}, begun: time.Now()}
		// Begun only on the session this Run started on, while it is
		// still the source's: Close or Open would not end it.
		s.mu.Lock()
		if s.gen != gen {
			s.mu.Unlock()
			return errTakenOver
		}
		err := sess.Begin()
		if err == nil {
			s.epoch.Store(ep)
		}
		s.mu.Unlock()
		if err != nil {
			return classify(fmt.Errorf("kafka: begin transaction: %w", err))
		}
		if err := s.runEpoch(ctx, sess, ep, out); err != nil || s.stopCtx.Err() != nil {
			// Close ends the epoch, once the pipeline settled its
			// records.
			return err
		}
		if err := s.waitSettled(ctx, ep); err != nil {
			return err
		}
		if err := s.end(ctx, sess, ep); err != nil {
			return err
		}
		// An abort rewound the client: to the group's offsets, when it
		// holds older ones (see realign). Only Run's own ends do this: the
		// client an end of Close or Open aborts on is closed after it.
		if s.rewound.Swap(false) {
			if err := s.realign(ctx, sess); err != nil {
				return err
			}
		}
	}
}

// runEpoch polls and emits records until the epoch's time is up, ctx is
// done or Stop is called.
func (s *TransactSource) runEpoch(ctx context.Context, sess *kgo.GroupTransactSession, ep *epochState, out node.Emitter[Message]) error {
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stopCtx, cancel)()
	timer := s.core.clock.NewTimer(s.commitInterval)
	defer timer.Stop()
	up := make(chan struct{})
	go func() {
		select {
		case <-timer.Chan():
			close(up)
			cancel()
		case <-pollCtx.Done():
		}
	}()
	for {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		select {
		case <-up:
			return nil
		default:
		}
		if pollCtx.Err() != nil {
			return nil // stopped
		}
		room := s.maxInFlight - int(ep.inFlight.Load())
		if room <= 0 {
			select {
			case <-s.freed:
			case <-pollCtx.Done():
			}
			continue
		}
		if err := s.pollEmit(ctx, pollCtx, sess, ep, room, out); err != nil {
			return err
		}
	}
}

// pollEmit polls up to room records and emits them. The poll under way
// counts as a record of ep not yet emitted, from before the client takes
// the records (their offsets then join what the transaction's commit
// commits) until the last of them is emitted: a Close on another
// goroutine meanwhile aborts ep.
func (s *TransactSource) pollEmit(ctx, pollCtx context.Context, sess *kgo.GroupTransactSession, ep *epochState, room int, out node.Emitter[Message]) error {
	ep.unemitted.Add(1)
	defer s.emitted(ep)
	fetches := sess.PollRecords(pollCtx, room)
	if fetches.IsClientClosed() {
		return resilience.MarkTransient(fmt.Errorf("kafka: exactly-once consume: %w", ErrConnectionLost))
	}
	var ferr error
	fetches.EachError(func(topic string, partition int32, err error) {
		if ferr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
			!connectionLost(err) {
			ferr = classify(fmt.Errorf("kafka: exactly-once consume %s partition %d: %w", topic, partition, err))
		}
	})
	var emitErr error
	ep.unemitted.Add(int64(fetches.NumRecords()))
	fetches.EachRecord(func(r *kgo.Record) {
		defer s.emitted(ep)
		if emitErr != nil {
			// Not emitted: the epoch must not commit past it.
			ep.tainted.Store(true)
			return
		}
		emitErr = s.emit(ctx, ep, r, out)
	})
	if emitErr != nil {
		return emitErr
	}
	if ferr != nil {
		ep.tainted.Store(true)
		return ferr
	}
	return nil
}

// emit emits r tracked, counted in ep.
func (s *TransactSource) emit(ctx context.Context, ep *epochState, r *kgo.Record, out node.Emitter[Message]) error {
	id := recordID{r.Topic, r.Partition, r.Offset}
	s.dmu.Lock()
	s.deliveries[id]++
	d := s.deliveries[id]
	ep.emitted[id] = d
	s.dmu.Unlock()
	m := Message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
		Timestamp: r.Timestamp, Deliveries: d}
	if len(r.Headers) > 0 {
		m.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			m.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	ep.inFlight.Add(1)
	ep.polled.Add(1)
	var once atomic.Bool
	err := out.EmitTracked(ctx, m, func(o node.Outcome) {
		if !once.CompareAndSwap(false, true) {
			return
		}
		switch o {
		case node.Delivered, node.Filtered, node.Skipped, node.DeadLettered, node.HandedOff:
		default:
			ep.tainted.Store(true)
		}
		ep.inFlight.Add(-1)
		select {
		case s.freed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		ep.tainted.Store(true)
	}
	return err
}

// emitted counts one record of ep's poll emitted, or left unemitted;
// after the poll's last, a wait for the ended epochs looks again.
func (s *TransactSource) emitted(ep *epochState) {
	if ep.unemitted.Add(-1) == 0 {
		select {
		case s.freed <- struct{}{}:
		default:
		}
	}
}

// waitSettled waits for every record of ep to end.
func (s *TransactSource) waitSettled(ctx context.Context, ep *epochState) error {
	for ep.inFlight.Load() > 0 {
		select {
		case <-s.freed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// waitOld waits until no record of an ended epoch is in flight, or ctx
// is done, or Stop is called.
func (s *TransactSource) waitOld(ctx context.Context) error {
	for {
		s.dmu.Lock()
		live := s.old[:0]
		for _, ep := range s.old {
			if ep.live() {
				live = append(live, ep)
			}
		}
		clear(s.old[len(live):])
		s.old = live
		n := len(live)
		s.dmu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-s.freed:
		case <-s.stopCtx.Done():
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// end ends ep's transaction: a commit, with the offsets polled, when
// every record of it settled; an abort otherwise, which rewinds the
// client to the committed offsets. It lets a waiting rebalance go on.
// No output joins ep once end began; a record of ep still in flight
// aborts it, and is kept in old until it ends. An epoch ended already is
// left alone.
func (s *TransactSource) end(ctx context.Context, sess *kgo.GroupTransactSession, ep *epochState) error {
	s.core.mu.Lock()
	first := ep.ended.CompareAndSwap(false, true)
	s.core.mu.Unlock()
	if !first {
		// Ended already (Run ended it, then stopped before the next
		// began): there is no transaction to end.
		return nil
	}
	if ep.live() {
		ep.tainted.Store(true)
		s.dmu.Lock()
		live := s.old[:0]
		kept := false
		for _, o := range s.old {
			if o.live() {
				live = append(live, o)
				kept = kept || o == ep
			}
		}
		clear(s.old[len(live):])
		s.old = live
		if !kept {
			s.old = append(s.old, ep)
		}
		s.dmu.Unlock()
	}
	commit := !ep.tainted.Load()
	live := ctx.Err() == nil
	watch := s.watchOf(sess)
	watch.reset()
	committed, err := sess.End(ctx, kgo.TransactionEndTry(commit))
	unconfirmed := watch.commitUnconfirmed()
	sess.AllowRebalance()
	var ke *kerr.Error
	switch {
	case err != nil && commit && live && (!errors.As(err, &ke) || errors.Is(err, kerr.UnknownServerError)):
		// No broker refused the commit: the context ended or the
		// connection broke while it was under way, and the EndTxn may
		// have reached the broker, which then commits. Not an abort:
		// its records may not be read again.
		s.unknown.Add(1)
		s.forget(ep)
		// The client keeps the transaction for an abort, and holds the
		// offsets before it as the group's: a Run again on it ends that
		// first (see Run).
		s.unended.Store(sess)
		s.stale.Store(sess)
		return classify(fmt.Errorf("kafka: end transaction: the commit's outcome is unknown: %w: %w", ErrOutcomeUnknown, err))
	case err != nil && brokerEndedTxn(err) && time.Since(ep.begun) >= s.txnTimeout:
		// The broker aborted the transaction, past TransactionTimeout,
		// and fenced this producer's epoch: the epoch's records are read
		// again, by a new client (a node restart: Close, Open). Before
		// it, a fence is another live client's with the same
		// TransactionalID, and stays permanent.
		s.aborted.Add(1)
		return resilience.MarkTransient(fmt.Errorf("kafka: end transaction: the broker aborted it (open longer than TransactionTimeout, %s); a node restart reopens the client: %w",
			s.txnTimeout, brokerErr(err)))
	case err != nil:
		s.aborted.Add(1)
		return classify(fmt.Errorf("kafka: end transaction: %w", err))
	case committed:
		s.committed.Add(1)
		// A committed record is not read again here.
		s.forget(ep)
	case unconfirmed && live:
		// The broker answered the commit UNKNOWN_SERVER_ERROR, which
		// some brokers do after committing; the client then reports it
		// not committed and rewinds to the offsets it last saw
		// committed, so that the epoch's records would be read, and
		// their outputs committed, again. The group's committed offsets
		// tell which it was.
		stored, ferr := s.commitStored(ctx, sess, ep)
		switch {
		case ferr != nil:
			s.unknown.Add(1)
			s.forget(ep)
			// The client rewound: a Run again on it first sets it to
			// the group's offsets, or fails.
			s.stale.Store(sess)
			return classify(fmt.Errorf("kafka: end transaction: the commit's outcome is unknown (the broker answered UNKNOWN_SERVER_ERROR, and the group's offsets could not be read): %w: %w", ErrOutcomeUnknown, ferr))
		case stored:
			s.committed.Add(1)
			s.forget(ep)
			// The client still holds the offsets before the epoch as
			// the group's: its later rewinds must be corrected.
			s.stale.Store(sess)
		default:
			s.aborted.Add(1)
			s.rewound.Store(true)
		}
	default:
		s.aborted.Add(1)
		s.rewound.Store(true)
	}
	return nil
}

// An endWatch is an exactly-once client's logger: it logs nothing, and
// learns from what franz-go v1.22's GroupTransactSession.End logs whether
// it sent a commit (the "transaction session ending" line's
// will_try_commit) and whether an end was answered UNKNOWN_SERVER_ERROR,
// after which End reports the transaction as not committed (it retries
// the end as an abort, which sends nothing) though the broker may have
// committed it. End runs on one goroutine at a time per client; the
// client logs from its own goroutines too, hence the atomics.
type endWatch struct {
	tried, unknownAnswer atomic.Bool
}

func (*endWatch) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (w *endWatch) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	switch {
	case msg == "transaction session ending":
		for i := 0; i+1 < len(keyvals); i += 2 {
			if k, ok := keyvals[i].(string); ok && k == "will_try_commit" {
				tried, _ := keyvals[i+1].(bool)
				w.tried.Store(tried)
			}
		}
	case strings.Contains(msg, "end transaction returned an unknown server error"):
		w.unknownAnswer.Store(true)
	}
}

// reset forgets what an earlier End logged.
func (w *endWatch) reset() {
	w.tried.Store(false)
	w.unknownAnswer.Store(false)
}

// commitUnconfirmed reports whether the End since reset sent a commit
// and had an answer UNKNOWN_SERVER_ERROR.
func (w *endWatch) commitUnconfirmed() bool { return w.tried.Load() && w.unknownAnswer.Load() }

// watchOf returns the endWatch of sess; an endWatch that never learns
// anything for a session that has none (it was closed).
func (s *TransactSource) watchOf(sess *kgo.GroupTransactSession) *endWatch {
	if w, ok := s.watches.Load(sess); ok {
		return w.(*endWatch)
	}
	return &endWatch{}
}

// fetchRetryWait is the wait, on the source's clock, before the group's
// committed offsets are asked for again after a retryable answer (such
// as UNSTABLE_OFFSET_COMMIT, while a transaction's markers are written).
const fetchRetryWait = 100 * time.Millisecond

// fetchCommitted returns the group's committed offsets once no
// transaction's offsets are pending (RequireStable), asking again after a
// retryable answer, within CloseTimeout.
func (s *TransactSource) fetchCommitted(ctx context.Context, sess *kgo.GroupTransactSession) (kadm.OffsetResponses, error) {
	fctx, cancel := context.WithTimeout(kadm.RequireStable(ctx), s.core.closeTimeout)
	defer cancel()
	adm := kadm.NewClient(sess.Client())
	for {
		got, err := adm.FetchOffsets(fctx, s.group)
		if err == nil {
			err = got.Error()
		}
		if err == nil {
			return got, nil
		}
		if !kerr.IsRetriable(err) || fctx.Err() != nil {
			if fctx.Err() != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("%w (within CloseTimeout, %s)", err, s.core.closeTimeout)
			}
			return nil, err
		}
		t := s.core.clock.NewTimer(fetchRetryWait)
		select {
		case <-t.Chan():
		case <-fctx.Done():
		}
		t.Stop()
	}
}

// commitStored reports whether the group's committed offsets cover every
// record ep emitted (see fetchCommitted): the broker committed ep's
// transaction (or another member committed its partitions further since,
// which is as good). Then the client, which rewound to the offsets it
// last saw committed, is set to them, so that ep's records are not read
// again.
func (s *TransactSource) commitStored(ctx context.Context, sess *kgo.GroupTransactSession, ep *epochState) (bool, error) {
	want := map[string]map[int32]int64{}
	s.dmu.Lock()
	for id := range ep.emitted {
		ps := want[id.topic]
		if ps == nil {
			ps = map[int32]int64{}
			want[id.topic] = ps
		}
		ps[id.partition] = max(ps[id.partition], id.offset+1)
	}
	s.dmu.Unlock()
	if len(want) == 0 {
		return false, nil
	}
	got, err := s.fetchCommitted(ctx, sess)
	if err != nil {
		return false, err
	}
	for topic, ps := range want {
		for p, next := range ps {
			if o, ok := got.Lookup(topic, p); !ok || o.At < next {
				return false, nil
			}
		}
	}
	sess.Client().SetOffsets(committedOffsets(got))
	return true, nil
}

// realign sets the client of sess, which has just rewound to what it
// holds as the group's committed offsets, to the group's own, when a
// commit answered UNKNOWN_SERVER_ERROR left the client's behind (see
// commitStored); else it does nothing. Run calls it after its own aborts
// and as it starts. An error ends the Run: the client would read a
// committed epoch's records again.
func (s *TransactSource) realign(ctx context.Context, sess *kgo.GroupTransactSession) error {
	if s.stale.Load() != sess {
		return nil
	}
	got, err := s.fetchCommitted(ctx, sess)
	if err != nil {
		return classify(fmt.Errorf("kafka: exactly-once: after an abort, the group's committed offsets could not be read to set the client to them (it holds older ones since a commit answered UNKNOWN_SERVER_ERROR was found stored): %w", err))
	}
	sess.Client().SetOffsets(committedOffsets(got))
	return nil
}

// committedOffsets are the offsets of got to set a client to.
func committedOffsets(got kadm.OffsetResponses) map[string]map[int32]kgo.EpochOffset {
	set := map[string]map[int32]kgo.EpochOffset{}
	got.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil || o.At < 0 {
			return
		}
		if set[o.Topic] == nil {
			set[o.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[o.Topic][o.Partition] = kgo.EpochOffset{Epoch: o.LeaderEpoch, Offset: o.At}
	})
	return set
}

// forget drops the deliveries counted for ep's records, once they may
// have been committed.
func (s *TransactSource) forget(ep *epochState) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	for id, d := range ep.emitted {
		if s.deliveries[id] == d {
			delete(s.deliveries, id)
		}
	}
}

// brokerEndedTxn reports whether err says that the broker ended the
// transaction, or fenced the producer's epoch: it aborted the transaction
// past TransactionTimeout (INVALID_PRODUCER_EPOCH, then PRODUCER_FENCED),
// or another client took the TransactionalID.
func brokerEndedTxn(err error) bool {
	return errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.TransactionAbortable)
}

// brokerErr is the broker's error in err, without the marks that made
// it permanent.
func brokerErr(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke
	}
	return err
}

// Stop ends Run cleanly: no more polls, Run returns nil, and Close commits
// the epoch once its records settled (it waits for them while the
// pipeline drains). A stopped source stays stopped.
func (s *TransactSource) Stop() { s.stopFunc() }

// Close ends the epoch under way, committing it if every record of it
// settled (as after a drain or Stop) and aborting it otherwise (as after
// a cancelled run), and closes the client, which leaves the group. The
// end and the leave are bounded by CloseTimeout each; a client whose leave
// got no answer in time closes in the background, and Close returns.
// A Run still running (the pipeline closes a source only after its Run
// returned) ends with an error matching [ErrNotOpen], and begins no
// epoch: Close waits for it to return, within a CloseTimeout of its own,
// and the epoch is aborted while a poll was under way or a record of it
// is in flight or not yet emitted.
func (s *TransactSource) Close(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	sess := s.sess
	s.sess = nil
	if sess == nil {
		s.mu.Unlock()
		return nil
	}
	running := s.takeOver()
	s.core.mu.Lock()
	s.core.cl = nil
	ep := s.retire()
	s.core.mu.Unlock()
	s.mu.Unlock()
	s.awaitRun(ctx, running)
	var err error
	if ep != nil {
		// A record still in flight aborts it (end): the pipeline left
		// it unsettled; its output, if it comes, is refused as stale.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.core.closeTimeout)
		err = s.end(cctx, sess, ep)
		cancel()
	}
	// The client leaves the group and closes within a CloseTimeout of
	// its own. A broker answers a connection's requests in turn, so an
	// end it has not answered holds the leave's request too, and the
	// client waits for a request it wrote until the broker answers or
	// its request timeout passes: Close does not wait for that. The
	// client then closes in the background; the member stays in the
	// group until its session times out (SessionTimeout).
	if cerr := s.closeSession(ctx, sess); cerr != nil && err != nil {
		// Without err the epoch ended: only the leave is left, which
		// changes no offset and no output.
		return errors.Join(err, cerr)
	}
	return err
}

// closeSession closes sess, which leaves the group, within CloseTimeout;
// past it, sess closes in the background and the error says so.
func (s *TransactSource) closeSession(ctx context.Context, sess *kgo.GroupTransactSession) error {
	s.watches.Delete(sess)
	s.stale.CompareAndSwap(sess, nil)
	s.unended.CompareAndSwap(sess, nil)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.core.closeTimeout)
	defer cancel()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		sess.CloseAllowingRebalance()
	}()
	select {
	case <-closed:
		return nil
	case <-lctx.Done():
		return fmt.Errorf("kafka: close the exactly-once client: it did not close within CloseTimeout (%v) (its leave got no answer, or waited behind an unanswered transaction end); it closes in the background: %w",
			s.core.closeTimeout, context.Cause(lctx))
	}
}

// Commits returns how many epochs the source committed, and Aborts how
// many it aborted (their records were read again).
func (s *TransactSource) Commits() int64 { return s.committed.Load() }

// Aborts returns how many epochs the source aborted: a record of them did
// not settle, an output's produce was unknown, or the group took a
// partition away mid-epoch.
func (s *TransactSource) Aborts() int64 { return s.aborted.Load() }

// Unknowns returns how many epochs the source tried to commit without
// learning whether they committed: the run's context ended, or the
// connection broke, while the commit was under way, or the client did not
// confirm it (the broker answered UNKNOWN_SERVER_ERROR) and the group's
// committed offsets could not be read (Run's error then
// matches [ErrOutcomeUnknown]; a pipeline's own error, when its caller
// cancelled it, stays the cancel's). Such an epoch is counted neither in
// Commits nor in Aborts; the broker either committed it or aborts it, and
// its records are read again only in the second case.
func (s *TransactSource) Unknowns() int64 { return s.unknown.Load() }

// A TransactSink is the producing end of an [ExactlyOnce]: a [node.Sink]
// that produces each item's record inside the source's current
// transaction and waits for its ack. It is safe for concurrent use, so it
// can run under Parallel or Keyed.
type TransactSink[T any] struct {
	src    *TransactSource
	record func(T) (*kgo.Record, error)
}

// Write produces item's record in the current transaction. A produce
// whose outcome is unknown aborts the epoch (the error is transient, for
// the item retry, which produces again in the same epoch: the abort
// discards both).
//
// An output refused because the broker ended the transaction (it was
// open longer than TransactionTimeout, or another client took the
// TransactionalID) aborts the epoch, and the error is transient and
// blameless: the item is not at fault, and its record is read again.
//
// An item whose record's epoch has ended is not produced, and Write
// returns nil: that epoch's transaction was aborted (it cannot commit
// while a record of it is in flight), which discards its outputs, and
// its records are read again, their outputs written in a later epoch.
// So is an item whose produce fails after its epoch ended. Such an item
// is a Message (T is Message) emitted before a source restart, or any
// item after a cancelled run's Close.
func (k *TransactSink[T]) Write(ctx context.Context, item T) error {
	rec, err := k.record(item)
	if err != nil {
		return resilience.MarkPermanent(fmt.Errorf("kafka: exactly-once sink: Record: %w", err))
	}
	if rec == nil {
		return resilience.MarkPermanent(errors.New("kafka: exactly-once sink: Record returned a nil record"))
	}
	var ep *epochState
	admit := func() error {
		e, err := k.src.admit(any(item))
		ep = e
		return err
	}
	err = k.src.core.produce(ctx, rec, admit)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStale):
		return nil
	case ep != nil && ep.ended.Load():
		// Its epoch aborted: whatever became of the record, the abort
		// discards it.
		return nil
	case ep != nil && brokerEndedTxn(err):
		// The broker ended the transaction under the record (it was open
		// longer than TransactionTimeout, or another client took the
		// TransactionalID): the epoch aborts and its records are read
		// again. Not the item's fault.
		ep.tainted.Store(true)
		return resilience.MarkBlameless(resilience.MarkTransient(fmt.Errorf(
			"kafka: exactly-once sink: the broker ended the epoch's transaction (the epoch aborts, its records are read again): %w", brokerErr(err))))
	case errors.Is(err, ErrOutcomeUnknown) && ep != nil:
		// The record may be in the transaction: a retry could put it
		// there twice, so the epoch must not commit. A record that
		// failed otherwise is not in it, and its item's outcome decides
		// (a dead-lettered item settles, and does not abort every epoch
		// that reads it again).
		ep.tainted.Store(true)
	}
	return err
}
