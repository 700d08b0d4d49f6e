package rabbitmq

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

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A Source consumes a RabbitMQ queue into a pipeline. It is a
// [node.Source] of [Message] with Open and Close: the pipeline opens it (a
// connection, a channel with the prefetch limit, the declarations), runs
// it, and closes it.
//
// Every message is emitted with EmitTracked and settled by its outcome:
// Delivered, Filtered and Skipped ack it; DeadLettered acks it too (it is
// in the dead-letter sink, or [Source.DeadLetter] put a copy of it into the
// retry topology); Failed (the run ended first) puts it back in the
// queue. A message is never acked before the pipeline is done with it, so a
// process that dies loses nothing: the broker delivers what was not acked
// to another consumer. Sinks must therefore be idempotent.
//
// When the connection or channel is lost, Run returns an error matching
// [ErrConnectionLost] that is transient; with node restart enabled on the
// source's node, the pipeline closes the source, waits its backoff, opens
// it again and calls Run, and the broker redelivers what was in flight.
//
// Two ways to stop: cancelling the run's context stops every node at once,
// and what was in flight goes back to the queue; [Source.Stop] ends Run
// cleanly, and Close then waits (up to DrainTimeout) for the items in
// flight to finish so that they are acked.
type Source struct {
	cfg    SourceConfig
	prefix string // makes this source's delivery ids unique

	mu       sync.Mutex
	sess     *session
	seq      int             // sessions opened, for their ids
	runCtx   context.Context // of the Run on sess
	drain    bool            // the Run on sess ended by Stop
	stop     chan struct{}
	stopOnce sync.Once

	byID sync.Map // delivery id -> *delivery, while in flight

	// copies publishes the copies of messages sent to the retry topology
	// or back to the queue with their count (see retrySink.Write, HandOff
	// and recount), on a connection of its own; nil without either.
	copies *pubCore

	// qtype is the queue's type, as Open found it.
	qtype string
	// dl and dlBase are the pipeline's dead-letter sink and what it knows
	// of the envelope, for poison messages (pipeline.DeadLetterWriter).
	dl       deadletter.Sink
	dlBase   deadletter.Envelope
	poisoned atomic.Int64
	// crash is the crash ledger, from Open to Close (nil without
	// CrashLedger): see crash.go.
	crash *crashledger.Ledger
}

// NewSource returns a Source for cfg, or every problem of cfg joined, each
// a [*ConfigError].
func NewSource(cfg SourceConfig) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg.withDefaults(), prefix: randomID(), stop: make(chan struct{})}
	if s.cfg.Retry.Enabled || s.cfg.MaxDeliveries > 0 {
		// Copies go straight to a queue, through the default exchange,
		// mandatory: a missing queue returns them as an error.
		core, err := newCore(s.cfg.URL, "", true,
			Confirms{Enabled: true, WaitFor: true, Timeout: DefaultConfirmTimeout}, PubRetry{Enabled: true},
			s.cfg.DialTimeout, s.cfg.CloseTimeout, s.cfg.Clock)
		if err != nil {
			return nil, err
		}
		core.name = "sluice source " + s.cfg.Queue + " copies"
		s.copies = core
	}
	return s, nil
}

// Redeliveries returns the retry topology's MaxRetry and its longest
// tier's delay, (0, 0) without it: a message is delivered at most MaxRetry
// + 1 times, which pipeline's Plan counts (node.Redeliverer).
func (s *Source) Redeliveries() (int, time.Duration) {
	if !s.cfg.Retry.Enabled {
		return 0, 0
	}
	t := s.cfg.Retry.tiers()
	return s.cfg.Retry.MaxRetry, t[len(t)-1]
}

// Config returns the source's config with defaults applied.
func (s *Source) Config() SourceConfig { return s.cfg }

// Open connects, opens a channel with the prefetch limit, and declares
// what the config asks for (or checks that the queue exists). A
// connection refused or lost is transient, so node retry can run Open
// again; a refusal by the broker (an unknown queue, a declaration that
// differs from the existing one) is permanent.
func (s *Source) Open(ctx context.Context) error {
	s.mu.Lock()
	s.seq++
	id := s.prefix + "-" + strconv.Itoa(s.seq)
	s.mu.Unlock()
	conn, err := dial(ctx, s.cfg.URL, "sluice source "+s.cfg.Queue, s.cfg.DialTimeout)
	if err != nil {
		return err
	}
	err = func() error {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq: open channel: %w", err)
		}
		if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
			return fmt.Errorf("rabbitmq: set prefetch: %w", err)
		}
		qtype, err := declare(conn, ch, &s.cfg)
		if err != nil {
			return err
		}
		if s.cfg.MaxDeliveries > 0 && s.dl == nil {
			return resilience.MarkPermanent(&ConfigError{Field: "MaxDeliveries", Value: s.cfg.MaxDeliveries,
				Reason: "a poison message goes to the pipeline's dead-letter sink, and the pipeline has none: give it pipeline.WithDeadLetter"})
		}
		if err := s.openCrashLedger(); err != nil {
			return err
		}
		s.mu.Lock()
		s.qtype = qtype
		old := s.sess
		s.sess = newSession(id, conn, ch)
		s.sess.recount = s.recount
		s.drain = false
		s.mu.Unlock()
		if old != nil { // opened twice without a Close: do not leak the first
			_ = old.close(s.cfg.Clock, s.cfg.CloseTimeout)
		}
		return nil
	}()
	if err != nil {
		_ = closeConn(conn, s.cfg.CloseTimeout)
		return classify(err)
	}
	return nil
}

// Run consumes the queue and emits every delivery until ctx is done, Stop
// is called or the channel is lost. It returns nil after Stop, the
// context's cause when ctx is done, and a transient error matching
// [ErrConnectionLost] when the channel or connection went away.
func (s *Source) Run(ctx context.Context, out node.Emitter[Message]) error {
	s.mu.Lock()
	sess := s.sess
	s.runCtx = ctx
	s.mu.Unlock()
	if sess == nil {
		return ErrNotOpen
	}
	if s.stopped() {
		s.setDrain()
		return nil
	}
	tag := s.cfg.ConsumerTag
	if tag == "" {
		tag = "sluice-" + s.cfg.Queue + "-" + sess.id
		if len(tag) > 255 { // the protocol's limit
			tag = "sluice-" + sess.id
		}
	}
	deliveries, err := sess.ch.Consume(s.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return classify(fmt.Errorf("rabbitmq: consume queue %q: %w", s.cfg.Queue, err))
	}
	for {
		select {
		case <-ctx.Done():
			// Closing the connection, in Close, cancels the consumer and
			// returns whatever is in flight to the queue.
			return context.Cause(ctx)
		case <-s.stop:
			return s.finish(ctx, sess, tag, deliveries, out)
		case d, ok := <-deliveries:
			if !ok {
				return sess.lost(s.cfg.Queue)
			}
			if err := s.emit(ctx, sess, d, out); err != nil {
				return err
			}
		}
	}
}

// finish ends a Run after Stop: it cancels the consumer, emits what the
// broker had already sent, and returns nil so that the pipeline drains.
func (s *Source) finish(ctx context.Context, sess *session, tag string, deliveries <-chan amqp.Delivery, out node.Emitter[Message]) error {
	s.setDrain()
	if err := sess.ch.Cancel(tag, false); err != nil {
		// The channel is gone, and with it every unacked delivery went
		// back to the queue: there is nothing left to finish.
		return nil
	}
	for d := range deliveries {
		if err := s.emit(ctx, sess, d, out); err != nil {
			return err
		}
	}
	return nil
}

func (s *Source) emit(ctx context.Context, sess *session, d amqp.Delivery, out node.Emitter[Message]) error {
	dl := &delivery{src: s, sess: sess, tag: d.DeliveryTag, orig: d, past: pastOf(d.Headers, s.cfg.Queue)}
	dl.failures = s.failures(d)
	dl.orig.Acknowledger = nil
	dl.retries = xDeathCount(d.Headers, s.cfg.Queue)
	if dl.past != nil && dl.past.retries > dl.retries {
		dl.retries = dl.past.retries
	}
	dl.id = s.cfg.Queue + "/" + sess.id + "/" + strconv.FormatUint(d.DeliveryTag, 10)
	if k, ok := takeKept(s.cfg.Queue, d); ok {
		// Failed runs that no copy could count (see recount).
		dl.failures = max(dl.failures, k.failures)
		if p := pastOf(k.story, s.cfg.Queue); p != nil {
			dl.past, dl.kept = p, k.story
		}
	}
	msg := dl.message()
	if s.cfg.MaxDeliveries > 0 && dl.failures >= s.cfg.MaxDeliveries {
		return s.poison(ctx, dl, msg)
	}
	if handled, err := s.crashTurn(ctx, dl, msg); handled {
		return err
	}
	s.byID.Store(dl.id, dl)
	sess.track()
	return out.EmitTracked(ctx, msg, dl.done)
}

// Stop ends Run cleanly: the consumer is cancelled, the deliveries the
// broker already sent are emitted, and Run returns nil; the pipeline then
// drains, and Close waits for the items in flight so that they are acked.
// Stop is safe to call at any time and more than once; a stopped source
// stays stopped (a later Run returns nil at once).
func (s *Source) Stop() { s.stopOnce.Do(func() { close(s.stop) }) }

func (s *Source) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

func (s *Source) setDrain() {
	s.mu.Lock()
	s.drain = true
	s.mu.Unlock()
}

// Close closes the connection. After a Run ended by Stop it first waits,
// up to DrainTimeout or until the run fails, for the items in flight to be
// settled; otherwise it closes at once and the broker requeues them.
func (s *Source) Close(context.Context) error {
	s.mu.Lock()
	sess, drain, runCtx := s.sess, s.drain, s.runCtx
	s.sess, s.drain, s.runCtx = nil, false, nil
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	if drain && runCtx != nil {
		sess.waitIdle(runCtx, s.cfg.Clock, s.cfg.DrainTimeout)
	}
	err := errors.Join(sess.close(s.cfg.Clock, s.cfg.CloseTimeout), s.closeCrashLedger())
	if s.copies != nil {
		// The publisher connection of the copies goes too; a later copy
		// opens it again.
		err = errors.Join(err, s.copies.close())
	}
	return err
}

// lookup returns the delivery in flight that a correlation id names, or
// nil.
func (s *Source) lookup(id string) *delivery {
	if v, ok := s.byID.Load(id); ok {
		return v.(*delivery)
	}
	return nil
}

// A delivery is one message in flight, from its emit to its settlement.
type delivery struct {
	src     *Source
	sess    *session
	tag     uint64
	id      string
	retries int
	// failures is how many earlier deliveries of the message failed
	// (see Source.failures); rejected says this one did.
	failures int
	rejected bool
	// why is what the engine told of the run this delivery failed
	// (Message.Rejected).
	why atomic.Pointer[deadletter.Envelope]
	// orig is the message as it was delivered, and past what its headers
	// say of its earlier deliveries (nil: none), or what was kept in
	// process of them, kept (see recount).
	orig amqp.Delivery
	past *past
	kept amqp.Table
	// copied is set by the dead-letter wrapper once a copy of the message
	// is in the retry topology: the delivery itself is then acked.
	copied  atomic.Bool
	settled atomic.Bool
	// crash is the message's entry in the crash ledger; nil without one.
	crash *crashledger.Entry
}

// message returns the Message that d emits.
func (d *delivery) message() Message {
	o := d.orig
	return Message{
		Body: o.Body, Headers: o.Headers, Exchange: o.Exchange, RoutingKey: o.RoutingKey,
		MessageID: o.MessageId, ContentType: o.ContentType, Timestamp: o.Timestamp,
		Redelivered: o.Redelivered, Retries: d.retries, d: d,
	}
}

// done is the EmitTracked callback. It runs once per item on an engine
// goroutine, and only queues the settlement.
func (d *delivery) done(o node.Outcome) {
	if !d.settled.CompareAndSwap(false, true) {
		return
	}
	d.endCrash(o)
	d.src.byID.Delete(d.id)
	how := requeue
	switch o {
	case node.Delivered, node.Filtered, node.Skipped:
		how = ack
	case node.DeadLettered, node.HandedOff:
		// In the dead-letter sink, or copied into the retry topology.
		how = ack
	default:
		if d.src.cfg.MaxDeliveries > 0 {
			// Put back as a copy that carries its count of failures, one
			// more when the item failed the run (Rejected), so that a
			// poison message stops; the broker's own count then only
			// counts deliveries lost with a consumer.
			d.rejected = o == node.Rejected
			d.sess.settle(settle{tag: d.tag, how: recount, d: d})
			return
		}
	}
	d.sess.settle(settle{tag: d.tag, how: how})
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
