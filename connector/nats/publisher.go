package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// PubRetry configures the publisher's own retry of a publish that failed
// before the stream took it: no connection, or a connection lost before
// the PubAck. Each retry reconnects. When the retries run out the error is
// marked with [resilience.MarkRetried], so that the pipeline's layers do
// not multiply them; with PubRetry off such an error is transient, for the
// pipeline's item retry. It is the RabbitMQ connector's PubRetry, with the
// same meaning and defaults.
type PubRetry struct {
	// Enabled turns the publisher's own retry on; false, the zero value,
	// fails the publish at once, with a transient error for the
	// pipeline's item retry.
	Enabled bool
	// MaxRetry is the number of retries; MaxRetry = 3 allows 4 attempts.
	// Default [DefaultPubRetries].
	MaxRetry int
	// Delay is the wait before each retry. Default [DefaultPubRetryDelay].
	Delay time.Duration
}

// A PublisherConfig configures a [Publisher] of items of type T. URL and
// Message are required, and Subject unless Route is set.
type PublisherConfig[T any] struct {
	// URL is the server's URL. Required.
	URL string
	// Subject is the subject of every message, unless Route is set. A
	// stream must store it: a publish that no stream answers fails, with
	// an error that is transient (a stream without a leader for the
	// moment gives the same answer) for the pipeline's item retry.
	Subject string
	// Route, when set, gives each item's subject.
	Route func(item T) string
	// Message turns an item into the message's data and headers (its
	// Subject, when set, wins over Subject and Route). An error fails the
	// item permanently. Required.
	Message func(item T) (*natsgo.Msg, error)
	// MsgID gives each item's Nats-Msg-Id, by which the stream drops a
	// message it already stored within its duplicate window: a republish
	// (an item retried after a lost PubAck, a pipeline run again) is then
	// stored once. Default: the item's CorrelationID when T implements
	// [deadletter.Correlated], else no id. An id the Message already set
	// in its headers is kept.
	MsgID func(item T) string
	// AckTimeout bounds the wait for one PubAck. Default
	// [DefaultAckTimeout].
	AckTimeout time.Duration
	// PubRetry retries a publish that failed before the stream took it;
	// the zero value does not.
	PubRetry PubRetry
	// DialTimeout bounds connecting. Default [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds the flush at Close. Default
	// [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// Clock is what the publisher's waits use; default the real clock.
	Clock clockwork.Clock
}

// A Publisher is a [node.Sink] that publishes each item to a JetStream
// stream and waits for its PubAck: an item is delivered only once the
// stream stored it. It implements Open and Close for the pipeline's
// lifecycle, and is safe for concurrent use, so it can run under Parallel.
//
// Delivery is at least once; with MsgID (or items that are
// [deadletter.Correlated]) the stream's duplicate window turns a
// republish inside the window into a no-op, which [Publisher.Duplicates]
// counts.
type Publisher[T any] struct {
	cfg  PublisherConfig[T]
	core *pubCore
	// msgID is MsgID or its default.
	msgID func(T) string
}

// Validate reports every problem of c, joined, each a [*ConfigError];
// nil when c is valid. NewPublisher calls it.
func (c PublisherConfig[T]) Validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if c.Message == nil {
		add("Message", "nil", "required: it turns an item into a message")
	}
	if c.Subject == "" && c.Route == nil {
		add("Subject", `""`, "required unless Route is set")
	}
	errs = append(errs, coreProblems(c.URL, c.AckTimeout, c.PubRetry, c.DialTimeout, c.CloseTimeout)...)
	return errors.Join(errs...)
}

// NewPublisher returns a Publisher for cfg, or every problem of cfg
// joined, each a [*ConfigError] (see [PublisherConfig.Validate]).
func NewPublisher[T any](cfg PublisherConfig[T]) (*Publisher[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core, err := newCore(cfg.URL, cfg.AckTimeout, cfg.PubRetry, cfg.DialTimeout, cfg.CloseTimeout, cfg.Clock)
	if err != nil {
		return nil, err
	}
	core.name = "sluice publisher " + cfg.Subject
	core.reopen = true
	p := &Publisher[T]{cfg: cfg, core: core, msgID: cfg.MsgID}
	if p.msgID == nil {
		p.msgID = func(item T) string {
			if c, ok := any(item).(deadletter.Correlated); ok {
				return c.CorrelationID()
			}
			return ""
		}
	}
	return p, nil
}

// Open connects. A refused connection is transient.
func (p *Publisher[T]) Open(ctx context.Context) error { return p.core.open(ctx) }

// Write publishes item with its Nats-Msg-Id and waits for the stream's
// PubAck. See [PubRetry] for what it retries by itself.
func (p *Publisher[T]) Write(ctx context.Context, item T) error {
	closes := p.core.closes.Load() // a Close from now on comes during this Write
	msg, err := p.cfg.Message(item)
	if err != nil {
		return resilience.MarkPermanent(err)
	}
	if msg == nil {
		return resilience.MarkPermanent(errors.New("nats: Message returned a nil message"))
	}
	out := &natsgo.Msg{Subject: msg.Subject, Data: msg.Data, Header: msg.Header}
	if out.Subject == "" {
		out.Subject = p.cfg.Subject
		if p.cfg.Route != nil {
			out.Subject = p.cfg.Route(item)
		}
	}
	if out.Header.Get(jetstream.MsgIDHeader) == "" {
		if id := p.msgID(item); id != "" {
			out.Header = cloneHeader(out.Header)
			out.Header.Set(jetstream.MsgIDHeader, id)
		}
	}
	return p.core.publishSince(ctx, closes, out)
}

// Duplicates returns how many publishes the stream acknowledged as
// duplicates of a message it already had (same Nats-Msg-Id within its
// duplicate window), and so did not store again.
func (p *Publisher[T]) Duplicates() int64 { return p.core.duplicates.Load() }

// Close sends what the connection still buffers and closes it. A Write
// after Close fails with [ErrNotOpen], permanent, until Open is called again.
func (p *Publisher[T]) Close(context.Context) error { return p.core.close() }

func cloneHeader(h natsgo.Header) natsgo.Header {
	out := natsgo.Header{}
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// pubCore publishes messages on one connection, reconnecting when it is
// lost; it is the untyped heart of [Publisher] and [DeadLetterPublisher].
type pubCore struct {
	url, name    string
	ackTimeout   time.Duration
	retry        PubRetry
	dialTimeout  time.Duration
	closeTimeout time.Duration
	clock        clockwork.Clock
	duplicates   atomic.Int64

	// reopen says that close ends publishing until the next open (a
	// Publisher); without it a publish after close connects again (a
	// DeadLetterPublisher, which has no Open).
	reopen bool

	mu sync.Mutex // guards nc and js; held while a publish dials
	nc *natsgo.Conn
	js jetstream.JetStream
	// closed: closed, and reopen: publish fails until open. Set before
	// close looks at live, so that a connection dialled meanwhile sees it.
	closed atomic.Bool
	// closes counts the closes that set closed: a Write that began
	// before one is not refused as a Write after Close.
	closes atomic.Uint64
	// live is nc, for close, which must not wait for mu while a publish
	// dials.
	live atomic.Pointer[natsgo.Conn]
}

// coreProblems returns the problems of the settings shared by every
// publisher, each a [*ConfigError].
func coreProblems(url string, ackTimeout time.Duration, retry PubRetry, dialTimeout, closeTimeout time.Duration) []error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	validateURL(url, add)
	if ackTimeout < 0 {
		add("AckTimeout", ackTimeout, "must not be negative")
	}
	if retry.MaxRetry < 0 || retry.MaxRetry > resilience.MaxRepeats {
		add("PubRetry.MaxRetry", retry.MaxRetry, "must be in [0, 100]; 0 takes the default")
	}
	if retry.Delay < 0 {
		add("PubRetry.Delay", retry.Delay, "must not be negative")
	}
	if dialTimeout < 0 {
		add("DialTimeout", dialTimeout, "must not be negative")
	}
	if closeTimeout < 0 {
		add("CloseTimeout", closeTimeout, "must not be negative")
	}
	return errs
}

// newCore validates the settings shared by every publisher and returns a
// core with defaults applied.
func newCore(url string, ackTimeout time.Duration, retry PubRetry, dialTimeout, closeTimeout time.Duration, clock clockwork.Clock) (*pubCore, error) {
	if err := errors.Join(coreProblems(url, ackTimeout, retry, dialTimeout, closeTimeout)...); err != nil {
		return nil, err
	}
	c := &pubCore{url: url, ackTimeout: ackTimeout, retry: retry, dialTimeout: dialTimeout, closeTimeout: closeTimeout, clock: clock}
	if c.ackTimeout == 0 {
		c.ackTimeout = DefaultAckTimeout
	}
	if c.retry.MaxRetry == 0 {
		c.retry.MaxRetry = DefaultPubRetries
	}
	if c.retry.Delay == 0 {
		c.retry.Delay = DefaultPubRetryDelay
	}
	if c.dialTimeout == 0 {
		c.dialTimeout = DefaultDialTimeout
	}
	if c.closeTimeout == 0 {
		c.closeTimeout = DefaultCloseTimeout
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	return c, nil
}

// open connects unless a working connection is there already.
func (c *pubCore) open(ctx context.Context) error {
	c.closed.Store(false)
	_, err := c.conn(ctx)
	return err
}

// conn returns the JetStream context of a working connection, replacing a
// closed one.
func (c *pubCore) conn(ctx context.Context) (jetstream.JetStream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		// A write after Close is the program's error: a connection
		// dialled now would be closed by nothing.
		return nil, resilience.MarkPermanent(fmt.Errorf("nats: publish after Close: %w", ErrNotOpen))
	}
	if c.nc != nil && !c.nc.IsClosed() {
		return c.js, nil
	}
	c.nc, c.js = nil, nil
	nc, _, err := dial(ctx, c.url, c.name, c.dialTimeout)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, classify(fmt.Errorf("nats: jetstream: %w", err))
	}
	c.nc, c.js = nc, js
	c.live.Store(nc)
	if c.closed.Load() && c.live.CompareAndSwap(nc, nil) {
		// Close came while this dialled, and did not see it.
		c.nc, c.js = nil, nil
		nc.Close()
		return nil, blameless(fmt.Errorf("nats: the publisher closed while it connected: %w", ErrNotOpen))
	}
	return js, nil
}

// publish sends msg and waits for its PubAck, within AckTimeout. A
// publish that fails for a lost connection is retried under PubRetry, and
// blameless; the stream's refusals are permanent, but for a stream that
// cannot take it now (503), transient and blameless; a PubAck that does
// not come in time is a [*PubAckError], transient and blameless, not
// sent again here. Whatever may have been stored matches
// [ErrOutcomeUnknown].
func (c *pubCore) publish(ctx context.Context, msg *natsgo.Msg) error {
	return c.publishSince(ctx, c.closes.Load(), msg)
}

// publishSince is publish for a Write that began when c.closes was
// closes: a Close after that is a Close during the Write, not before it.
func (c *pubCore) publishSince(ctx context.Context, closes uint64, msg *natsgo.Msg) error {
	// sent is the error of the last attempt that may have reached the
	// stream, while later attempts fail before they send: the outcome
	// stays unknown.
	var sent error
	for attempt := 1; ; attempt++ {
		err := c.attempt(ctx, msg)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			switch {
			case errors.Is(err, ErrOutcomeUnknown):
				return err
			case sent != nil:
				return outcomeUnknown(fmt.Errorf("%w (after an attempt whose PubAck never came: %w)", context.Cause(ctx), sent))
			}
			return context.Cause(ctx)
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			sent = err
		}
		if errors.Is(err, ErrNotOpen) && (attempt > 1 || c.closes.Load() != closes) || connectionLost(err) && c.isClosed() {
			// Closed during this Write: not the message's fault.
			if sent != nil {
				return blameless(outcomeUnknown(fmt.Errorf("%w (the publisher closed before its retry: %w)", sent, ErrNotOpen)))
			}
			return blameless(fmt.Errorf("nats: the publisher closed during the Write, before its retry: %w", ErrNotOpen))
		}
		if !connectionLost(err) {
			if sent != nil && !errors.Is(err, ErrOutcomeUnknown) {
				// The stream answered a retry; an earlier attempt may
				// have been stored all the same.
				return outcomeUnknown(fmt.Errorf("%w (an earlier attempt was sent: %w)", err, sent))
			}
			return err
		}
		if sent != nil {
			err = outcomeUnknown(err)
		}
		if !c.retry.Enabled {
			return blameless(err)
		}
		if attempt > c.retry.MaxRetry {
			return resilience.MarkBlameless(resilience.MarkRetried(fmt.Errorf("nats: publish gave up after %d attempts: %w", attempt, err), attempt))
		}
		if err := broker.Wait(ctx, c.clock, c.retry.Delay); err != nil {
			if sent != nil {
				return outcomeUnknown(fmt.Errorf("%w (after an attempt whose PubAck never came: %w)", err, sent))
			}
			return err
		}
	}
}

// attempt publishes msg once.
func (c *pubCore) attempt(ctx context.Context, msg *natsgo.Msg) error {
	js, err := c.conn(ctx)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx) // not sent
	}
	actx, cancel := context.WithTimeout(ctx, c.ackTimeout)
	defer cancel()
	ack, err := js.PublishMsg(actx, msg)
	switch {
	case err == nil:
		if ack.Duplicate {
			c.duplicates.Add(1)
		}
		return nil
	case ctx.Err() != nil:
		return outcomeUnknown(context.Cause(ctx)) // sent: the stream may have it
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, natsgo.ErrTimeout):
		// Before connectionLost, which takes a deadline for a net.Error:
		// the connection is there, the PubAck is late.
		return blameless(&PubAckError{Subject: msg.Subject, Timeout: c.ackTimeout})
	case connectionLost(err):
		return outcomeUnknown(fmt.Errorf("nats: publish to subject %q: %w: %w", msg.Subject, ErrConnectionLost, err))
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders):
		// No stream stores the subject, or its stream has no leader for
		// the moment (an election, a server restarting): nothing tells
		// the two apart, and the client's own retries cover only a short
		// election. Transient, so that the item's retry outlasts a
		// longer one; not blameless, so that a subject no stream will
		// ever store (a Route's bad subject) still runs out of retries.
		return resilience.MarkTransient(fmt.Errorf("nats: publish to subject %q: no stream stores the subject, or its stream has no leader now: %w", msg.Subject, err))
	}
	switch state, bytes := unavailable(err); {
	case state:
		return blameless(fmt.Errorf("nats: publish to subject %q: the stream cannot take it now: %w", msg.Subject, err))
	case bytes:
		return resilience.MarkTransient(fmt.Errorf("nats: publish to subject %q: the stream cannot take it now, or ever if it is larger than the stream's MaxBytes: %w", msg.Subject, err))
	}
	return classify(fmt.Errorf("nats: publish to subject %q: %w", msg.Subject, err))
}

// isClosed reports whether close ended publishing until the next open.
func (c *pubCore) isClosed() bool { return c.closed.Load() }

// close closes the connection, if one is open.
func (c *pubCore) close() error {
	if c.reopen {
		c.closed.Store(true)
		c.closes.Add(1)
		// No need of mu, which a Write may hold while it dials: a
		// connection dialled now sees closed and closes itself.
		return closeConn(c.live.Swap(nil), c.closeTimeout)
	}
	c.mu.Lock()
	nc := c.nc
	c.nc, c.js = nil, nil
	c.live.Store(nil)
	c.mu.Unlock()
	return closeConn(nc, c.closeTimeout)
}
