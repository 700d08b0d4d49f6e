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
// it) nak it, and the server delivers it again at once. With
// MaxDeliveries, a Failed delivery, one given back unemitted, and one
// that went to the broker's retry or was handed off, is spared: the
// poison guard does not count it (see ledger). A message is
// never acked before the pipeline is done with it, so a process that dies
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
	dl         deadletter.Sink
	dlBase     deadletter.Envelope
	poisoned   atomic.Int64
	redelivers atomic.Int64
	// spared counts, with MaxDeliveries, the deliveries that the poison
	// guard does not count (see ledger).
	spared *ledger
	// crash is the crash ledger, from Open to Close (nil without
	// CrashLedger): see crash.go.
	crash       *crashledger.Ledger
	crashOpened time.Time
}

// maxStories bounds the stories a source keeps: a message redelivered to
// another process leaves its story here until this bound drops new ones.
const maxStories = 100_000

// NewSource returns a Source for cfg, or every problem of cfg joined, each
// a [*ConfigError].
func NewSource(cfg SourceConfig) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg.withDefaults(), prefix: randomID(), spared: newLedger(maxSpared)}
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
		s.mu.Lock()
		dl := s.dl
		s.mu.Unlock()
		if dl == nil {
			return resilience.MarkPermanent(&ConfigError{Field: "MaxDeliveries", Value: s.cfg.MaxDeliveries,
				Reason: "a poison message goes to the pipeline's dead-letter sink, and the pipeline has none: give it pipeline.WithDeadLetter"})
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
		if err == nil {
			// The spared deliveries were counted for this consumer only:
			// one created again counts afresh.
			s.spared.begin(s.cfg.Stream + "/" + s.cfg.Consumer + "@" + cons.CachedInfo().Created.Format(time.RFC3339Nano))
		}
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
	s.mu.Lock()
	old := s.sess
	s.sess, s.drain = sess, false
	s.mu.Unlock()
	if old != nil { // opened twice without a Close: do not leak the first
		_ = old.close(s.cfg.CloseTimeout)
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
			if err := wait(ctx, s.cfg.Clock, min(s.cfg.PullWait, time.Second)); err != nil {
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
	d := &delivery{src: s, sess: sess, msg: msg, seq: meta.Sequence.Stream, deliveries: int(meta.NumDelivered),
		stream: meta.Stream, stamp: meta.Timestamp}
	d.id = meta.Stream + "/" + strconv.FormatUint(d.seq, 10)
	sess.hold(d)
	s.holdCrash(d)
	return d
}

// giveBack naks d, held and not emitted, so that the server delivers it
// again at once. The delivery is spared: the message never entered the
// pipeline.
func (d *delivery) giveBack() {
	if d.settled.CompareAndSwap(false, true) {
		d.src.spare(d)
		d.sess.settle(settle{d: d, how: nak})
	}
}

// spare counts d's delivery as one the poison guard spares: it ended
// without its message being at fault (see ledger).
func (s *Source) spare(d *delivery) {
	if s.cfg.MaxDeliveries > 0 {
		s.spared.spare(d.seq)
	}
}

// forget drops what the ledger counts for d's message: it was settled for
// good.
func (s *Source) forget(d *delivery) {
	if s.cfg.MaxDeliveries > 0 {
		s.spared.forget(d.seq)
	}
}

// emit emits d's message, or dead-letters it as poison.
func (s *Source) emit(ctx context.Context, d *delivery, out node.Emitter[Message]) error {
	if v, ok := s.stories.LoadAndDelete(d.seq); ok {
		s.nStories.Add(-1)
		d.past = v.(*story)
	}
	msg := d.msg
	m := Message{
		Subject: msg.Subject, Data: msg.Data, Header: msg.Header, Stream: d.stream,
		Sequence: d.seq, Deliveries: d.deliveries, Timestamp: d.stamp, d: d,
	}
	if handled, err := s.crashCheck(ctx, d, m); handled {
		return err
	}
	if s.cfg.MaxDeliveries > 0 {
		// The deliveries the ledger spared do not count: the message was
		// only held when a run ended, was given back unemitted, or was
		// redelivered by the broker's retry or a hand-off.
		d.spared = min(s.spared.spared(d.seq), d.deliveries-1)
		if d.deliveries-d.spared > s.cfg.MaxDeliveries {
			return s.poison(ctx, d, m)
		}
	}
	if err := s.crashTurn(ctx, d); err != nil {
		return err
	}
	if d.deliveries > 1 {
		s.redelivers.Add(1)
	}
	s.byID.Store(d.id, d)
	d.emitted.Store(true)
	return out.EmitTracked(ctx, m, d.done)
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
	return errors.Join(sess.close(s.cfg.CloseTimeout), s.closeCrashLedger())
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
	seq        uint64
	deliveries int
	stamp      time.Time
	// past is what earlier deliveries told (nil: nothing known).
	past *story
	// spared is how many earlier deliveries the poison guard did not
	// count; emitted is set once the message is handed to the pipeline.
	spared  int
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
			// failed run, so the poison guard spares it.
			st.how, st.delay = nakDelay, d.src.cfg.nakDelay(w, d.deliveries)
			d.src.spare(d)
		} else {
			st.how = term
		}
	case node.HandedOff:
		// Spared as the broker's retry is.
		st.how, st.delay = nakDelay, d.src.cfg.nakDelay(time.Duration(d.handOff.Load()), d.deliveries)
		d.src.spare(d)
	case node.Failed:
		// The run ended before the item reached an outcome: not the
		// message's fault, so the poison guard spares this delivery.
		// Rejected (the item failed the run) counts.
		d.src.spare(d)
	}
	if st.how == ack || st.how == term {
		// Its story ends: the server delivers it no more.
		d.src.forget(d)
	}
	d.sess.settle(st)
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
