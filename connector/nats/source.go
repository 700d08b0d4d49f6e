package nats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A Source consumes a JetStream stream into a pipeline, through a durable
// pull consumer. It is a [node.Source] of [Message] with Open and Close:
// the pipeline opens it (a connection, the stream and the consumer, created
// or checked), runs it, and closes it.
//
// Every message is emitted with EmitTracked and settled by its outcome:
// Delivered, Filtered and Skipped ack it; DeadLettered terminates it (it is
// in the dead-letter sink), or naks it with the broker retry's delay when
// [Source.DeadLetter] chose that; HandedOff naks it with the hand-off's
// delay; Failed and Rejected (the run ended first, or failed because of
// it) nak it, and the server delivers it again at once; with
// MaxDeliveries, a Rejected message is instead published again as a copy
// that counts the failed run (see [HeaderFailures]), and acked; or, at its
// MaxDeliveries-th failed run, dead-lettered and terminated. A message
// is never acked before the pipeline is done with it, so a process that dies
// loses nothing: the server delivers what was not acked to another
// consumer after AckWait. Sinks must therefore be idempotent.
//
// The source pulls one request at a time, for at most the room it has
// under Batch, rather than with the client's continuous Messages or
// Consume iterators: every message it receives is tracked from its arrival
// and kept alive with in-progress acks (a message buffered inside an
// iterator would run out its AckWait unseen), and a cancelled run has only
// the one request's messages to give back (see pull).
//
// When the connection is lost, Run returns an error matching
// [ErrConnectionLost] that is transient; with node restart enabled on the
// source's node, the pipeline closes the source, waits its backoff, opens
// it again and calls Run, and the server delivers again what was in flight
// after AckWait.
//
// Two ways to stop: cancelling the run's context (or draining the
// pipeline) stops fetching, and the messages held but not emitted are
// nak'd at once; [Source.Stop] ends Run cleanly after emitting what the
// server had already sent, and Close then waits (up to DrainTimeout) for
// the items in flight to finish so that they are acked.
type Source struct {
	cfg    SourceConfig
	prefix string

	mu    sync.Mutex
	sess  *session
	seq   int
	drain bool // the Run on sess ended by Stop

	stopCtx  context.Context
	stopFunc context.CancelFunc

	byID sync.Map // correlation id -> *delivery, while in flight

	// stories keeps what a message's earlier deliveries told, by its
	// stream sequence, for its next delivery to this source: the broker
	// cannot carry it in the message (a nak changes nothing in it).
	stories    sync.Map // uint64 -> *story
	nStories   atomic.Int64
	letters    broker.Letters // the pipeline's dead-letter sink, for poison messages
	poisoned   atomic.Int64
	redelivers atomic.Int64
	// ackerGate and roomWait are for tests: the acker of each session sends
	// its settlements only once ackerGate is closed; roomWait is called when
	// Run waits for room, with what is held and what waits for the acker.
	ackerGate <-chan struct{}
	roomWait  func(held, unsent int)
	// crash is the crash ledger, from Open to Close (nil without
	// CrashLedger): see crash.go.
	crash       *crashledger.Ledger
	crashOpened time.Time
	// replaced holds the stream sequences of the messages this source
	// replaced by a counted copy and acked, or dead-lettered as poison and
	// terminated (see recount, poison), at most maxReplaced: the server
	// can deliver such a message once more (seen on 2.9.10, and when the
	// ack is lost as a loaded process closes its connection), and it must
	// not fail a run, or be dead-lettered, again.
	replaced  sync.Map // uint64 -> struct{}
	nReplaced atomic.Int64
}

// maxReplaced bounds Source.replaced; past it, it starts afresh.
const maxReplaced = 10_000

// maxStories bounds the stories a source keeps: a message redelivered to
// another process leaves its story here until this bound drops new ones.
const maxStories = 100_000

// NewSource returns a Source for cfg, or every problem of cfg joined, each
// a [*ConfigError].
func NewSource(cfg SourceConfig) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg.withDefaults(), prefix: randomID()}
	s.stopCtx, s.stopFunc = context.WithCancel(context.Background())
	return s, nil
}

// Config returns the source's config with defaults applied.
func (s *Source) Config() SourceConfig { return s.cfg }

// Redeliveries returns MaxDeliver - 1 and the longest wait of the broker's
// retry, (0, 0) without Retry: a message is delivered at most MaxDeliver
// times, which pipeline's Plan counts (node.Redeliverer).
func (s *Source) Redeliveries() (int, time.Duration) {
	if !s.cfg.Retry.Enabled {
		return 0, 0
	}
	d := s.cfg.Retry.Delay
	for _, b := range s.cfg.BackOff {
		d = max(d, b)
	}
	return s.cfg.MaxDeliver - 1, d
}

// Open connects, and creates or checks the stream and the durable
// consumer. A connection refused or lost is transient, so node retry can
// run Open again; a refusal by the server (a missing stream without
// Declare, a consumer whose settings differ) is permanent.
func (s *Source) Open(ctx context.Context) error {
	if s.cfg.MaxDeliveries > 0 {
		if s.letters.Sink() == nil {
			return resilience.MarkPermanent(&ConfigError{Field: "MaxDeliveries", Value: s.cfg.MaxDeliveries,
				Reason: "a poison message goes to " + broker.NoDeadLetterSink})
		}
	}
	s.mu.Lock()
	s.seq++
	id := s.prefix + "-" + strconv.Itoa(s.seq)
	s.mu.Unlock()
	nc, closed, err := dial(ctx, s.cfg.URL, "sluice source "+s.cfg.Stream+"/"+s.cfg.Consumer, s.cfg.DialTimeout)
	if err != nil {
		return err
	}
	err = func() error {
		js, err := jetstream.New(nc)
		if err != nil {
			return classify(fmt.Errorf("nats: jetstream: %w", err))
		}
		if err := ensureStream(ctx, js, &s.cfg); err != nil {
			return err
		}
		cons, err := ensureConsumer(ctx, js, &s.cfg)
		if err != nil {
			return err
		}
		return s.openCrashLedger(ctx, js, cons)
	}()
	if err != nil {
		nc.Close()
		return err
	}
	next := "$JS.API.CONSUMER.MSG.NEXT." + s.cfg.Stream + "." + s.cfg.Consumer
	sess := newSession(id, nc, closed, next, s.cfg.Clock, s.cfg.ProgressInterval)
	sess.recount = s.recount
	sess.mu.Lock()
	sess.gate = s.ackerGate
	sess.mu.Unlock()
	sess.nakDelay = func(d *delivery, w time.Duration) time.Duration { return s.cfg.nakDelay(w, d.deliveries) }
	s.mu.Lock()
	old := s.sess
	s.sess, s.drain = sess, false
	s.mu.Unlock()
	if old != nil { // opened twice without a Close: do not leak the first
		_ = old.close(nil, s.cfg.CloseTimeout)
	}
	return nil
}

// Run fetches messages and emits each until ctx is done, Stop is called
// or the connection is lost. It returns nil after Stop, the context's
// cause when ctx is done, and a transient error matching
// [ErrConnectionLost] when the connection went away.
func (s *Source) Run(ctx context.Context, out node.Emitter[Message]) error {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return ErrNotOpen
	}
	// Fetch only when half the batch is free, so that a busy pipeline
	// fetches in batches rather than one message per request.
	want := max(1, s.cfg.Batch/2)
	for {
		if s.stopCtx.Err() != nil {
			s.setDrain()
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		room := sess.room(s.cfg.Batch)
		if room < want {
			if s.roomWait != nil {
				s.roomWait(sess.counts())
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-s.stopCtx.Done():
				continue
			case <-sess.closed:
				return sess.lost(s.cfg.Stream, s.cfg.Consumer, nil)
			case <-sess.freed:
				continue
			}
		}
		// After a crash, nothing is delivered while a suspect runs alone
		// (see crash.go).
		if err := s.crashPause(ctx); err != nil {
			return err
		}
		err := s.pull(ctx, sess, s.crashRoom(room), out)
		if errors.Is(err, errBusy) {
			if err := broker.Wait(ctx, s.cfg.Clock, min(s.cfg.PullWait, time.Second)); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
}

// delivery returns the delivery of msg, held by sess, or nil when msg is
// not a JetStream delivery.
func (s *Source) delivery(sess *session, msg *natsgo.Msg) *delivery {
	meta, err := msg.Metadata()
	if err != nil {
		return nil
	}
	d := &delivery{src: s, sess: sess, msg: msg, seq: meta.Sequence.Stream, streamSeq: meta.Sequence.Stream, deliveries: int(meta.NumDelivered),
		stream: meta.Stream, stamp: meta.Timestamp}
	if c := carriedOf(msg.Header, meta.Stream, s.consumerName()); c.ok {
		// A copy this consumer published after a failed run: it is the
		// first message, failed c.failures times.
		if c.seq > 0 {
			d.seq = c.seq
		}
		d.failures, d.prior, d.carried, d.copy = c.failures, c.deliveries, c.past, true
	}
	d.id = meta.Stream + "/" + strconv.FormatUint(d.seq, 10)
	sess.hold(d)
	s.holdCrash(d)
	return d
}

// giveBack naks d, held and not emitted, so that the server delivers it
// again at once.
func (d *delivery) giveBack() {
	if d.settled.CompareAndSwap(false, true) {
		d.sess.settle(settle{d: d, how: nak})
	}
}

// emit emits d's message, or dead-letters it as poison.
func (s *Source) emit(ctx context.Context, d *delivery, out node.Emitter[Message]) error {
	if c, ok := copyFor(d.msg.Header, d.stream); ok && c != s.consumerName() {
		// The counted copy of a message that failed a run of another
		// consumer of the stream: that consumer's, not this one's. A
		// message that only names another consumer (forwarded with its
		// headers, or a consumer renamed) is emitted.
		if d.settled.CompareAndSwap(false, true) {
			d.sess.settle(settle{d: d, how: ack})
		}
		return nil
	}
	if _, ok := s.replaced.Load(d.streamSeq); ok {
		// Replaced by its copy, or dead-lettered, already: a late
		// duplicate.
		if d.settled.CompareAndSwap(false, true) {
			d.sess.settle(settle{d: d, how: ack})
		}
		return nil
	}
	if v, ok := s.stories.LoadAndDelete(d.seq); ok {
		s.nStories.Add(-1)
		st := v.(*story)
		d.past = st
		// Failed runs that no copy could count (see Source.recount).
		d.failures = max(d.failures, st.failures)
	} else {
		d.past = d.carried
	}
	m := d.message()
	if handled, err := s.crashCheck(ctx, d, m); handled {
		return err
	}
	if s.cfg.MaxDeliveries > 0 && d.failures >= s.cfg.MaxDeliveries {
		// Only the runs the message failed count (node.Rejected), carried
		// in its copies: not the server's deliveries, which also count
		// neighbours held when a run ended, redeliveries into a pull
		// request given up, and deliveries lost with a crashed process.
		return s.poison(ctx, d, m)
	}
	if err := s.crashTurn(ctx, d); err != nil {
		return err
	}
	if m.Deliveries > 1 {
		s.redelivers.Add(1)
	}
	s.byID.Store(d.id, d)
	d.emitted.Store(true)
	return out.EmitTracked(ctx, m, d.done)
}

// message returns the Message that d emits.
func (d *delivery) message() Message {
	msg := d.msg
	return Message{
		Subject: msg.Subject, Data: msg.Data, Header: msg.Header, Stream: d.stream,
		Sequence: d.seq, Deliveries: d.prior + d.deliveries, Timestamp: d.stamp, d: d,
	}
}

// Stop ends Run cleanly: no more fetches, the messages the server already
// sent are emitted, and Run returns nil; the pipeline then drains, and
// Close waits for the items in flight so that they are acked. Stop is
// safe to call at any time and more than once; a stopped source stays
// stopped (a later Run returns nil at once).
func (s *Source) Stop() { s.stopFunc() }

func (s *Source) setDrain() {
	s.mu.Lock()
	s.drain = true
	s.mu.Unlock()
}

// Close closes the connection. After a Run ended by Stop it first waits,
// up to DrainTimeout, for the items in flight to be settled; otherwise it
// naks at once what is still held, and the server delivers it again.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	sess, drain := s.sess, s.drain
	s.sess, s.drain = nil, false
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	if drain {
		sess.waitIdle(ctx.Done(), s.cfg.Clock, s.cfg.DrainTimeout)
	}
	return errors.Join(sess.close(ctx.Done(), s.cfg.CloseTimeout), s.closeCrashLedger())
}

// Redelivered returns how many messages the source emitted that the
// server had delivered before.
func (s *Source) Redelivered() int64 { return s.redelivers.Load() }

// lookup returns the delivery in flight that a correlation id names, or
// nil.
func (s *Source) lookup(id string) *delivery {
	if v, ok := s.byID.Load(id); ok {
		return v.(*delivery)
	}
	return nil
}

// A delivery is one message held, from its fetch to its settlement.
type delivery struct {
	src        *Source
	sess       *session
	msg        *natsgo.Msg
	id         string
	stream     string
	seq        uint64 // of the message first published (HeaderSequence)
	streamSeq  uint64 // of this delivery's message: a copy's own
	deliveries int
	stamp      time.Time
	// past is what earlier deliveries told (nil: nothing known), carried
	// what the copy's headers told.
	past, carried *story
	// failures is the runs the message failed before (HeaderFailures),
	// prior the deliveries of its earlier copies; rejected is why this
	// delivery failed the run, when it did (Message.Rejected).
	failures, prior int
	rejected        atomic.Pointer[deadletter.Envelope]
	// copy says the message is a counted copy of this consumer's.
	copy bool
	// emitted is set once the message is handed to the pipeline.
	emitted atomic.Bool
	// retry is the wait of the broker's retry that the dead-letter wrapper
	// chose, handOff the hand-off's; 0 for none.
	retry   atomic.Int64
	handOff atomic.Int64
	settled atomic.Bool
	// crash is the message's entry in the crash ledger; nil without one.
	crash *crashledger.Entry
}

// done is the EmitTracked callback. It runs once per item on an engine
// goroutine, and only queues the settlement.
func (d *delivery) done(o node.Outcome) {
	if !d.settled.CompareAndSwap(false, true) {
		return
	}
	d.src.byID.CompareAndDelete(d.id, d)
	st := settle{d: d, how: nak}
	switch o {
	case node.Delivered, node.Filtered, node.Skipped:
		st.how = ack
	case node.DeadLettered:
		if w := time.Duration(d.retry.Load()); w > 0 {
			// The broker's retry: the connector's own redelivery, not a
			// failed run; the message's count of failed runs is unchanged.
			st.how, st.delay = nakDelay, d.src.cfg.nakDelay(w, d.deliveries)
		} else {
			st.how = term
		}
	case node.HandedOff:
		st.how, st.delay = nakDelay, d.src.cfg.nakDelay(time.Duration(d.handOff.Load()), d.deliveries)
	case node.Rejected:
		// The item failed the run: with the poison guard, a copy counts
		// it. Failed (the run ended first) is a plain nak, and counts
		// nothing.
		if d.src.cfg.MaxDeliveries > 0 {
			st.how = recount
		}
	}
	d.sess.settle(st)
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
