package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/resilience"
)

// Confirms configures publisher confirms: the broker acks each message
// once it has taken responsibility for it (routed it, and written it to
// disk for a durable queue), or nacks it.
type Confirms struct {
	// Enabled puts the publisher's channel in confirm mode; false, the
	// zero value, publishes without confirms: Write returns once the
	// message is sent, and nothing reports a message the broker lost.
	Enabled bool
	// WaitFor makes Write wait for the message's confirm before it returns,
	// so that an item is delivered only once the broker has it, and a nack
	// or a timeout fails that item (transiently, for item retry). Without
	// it Write returns once the message is sent; Flush, at the end of a
	// successful run, waits for the confirms still missing and fails the run
	// if any publish was nacked, returned or not confirmed in time: faster,
	// but a failure can no longer be retried item by item.
	WaitFor bool
	// Timeout bounds the wait for one confirm. Default
	// [DefaultConfirmTimeout].
	Timeout time.Duration
}

// PubRetry configures the publisher's own retry of a publish that failed
// before the broker took it: no connection, or a connection or channel lost
// before the confirm. Each retry reconnects. When the retries run out the
// error is marked with [resilience.MarkRetried], so that the pipeline's
// layers do not multiply them; with PubRetry off such an error is
// transient, for the pipeline's item retry.
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
// Publishing are required.
type PublisherConfig[T any] struct {
	// URL is the broker's AMQP URI. Required.
	URL string
	// Exchange is where messages go; "" is the default exchange, which
	// routes by queue name. A named exchange must exist: Open checks it.
	Exchange string
	// RoutingKey is the key of every message, unless Route is set.
	RoutingKey string
	// Route, when set, gives each item's routing key.
	Route func(item T) string
	// Publishing turns an item into a message. An error fails the item
	// permanently. Required.
	Publishing func(item T) (amqp.Publishing, error)
	// Mandatory asks the broker to return a message that no queue takes;
	// the Write fails with a permanent error matching [ErrReturned].
	// Requires Confirms.Enabled, which is how a return is tied to its
	// publish (see [SeqHeader]).
	Mandatory bool
	// Confirms configures publisher confirms; the zero value publishes
	// without them.
	Confirms Confirms
	// PubRetry retries a publish that failed before the broker took it;
	// the zero value does not.
	PubRetry PubRetry
	// DialTimeout bounds connecting and the AMQP handshake. Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds the closing handshake with the broker. Default
	// [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// Clock is what the publisher's waits use; default the real clock.
	Clock clockwork.Clock
}

// A Publisher is a [node.Sink] that publishes each item to an exchange. It
// implements Open, Close and Flush for the pipeline's lifecycle, and is
// safe for concurrent use, so it can run under Parallel: publishes share one
// channel, and each waits for its own confirm.
//
// Delivery is at least once: a retried publish whose first attempt reached
// the broker after all (a late confirm, a connection lost after the broker
// took the message) is published twice, so consumers must be idempotent.
type Publisher[T any] struct {
	cfg  PublisherConfig[T]
	core *pubCore
}

// Validate reports every problem of c, joined, each a [*ConfigError];
// nil when c is valid. NewPublisher calls it.
func (c PublisherConfig[T]) Validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if c.Publishing == nil {
		add("Publishing", "nil", "required: it turns an item into a message")
	}
	if len(c.Exchange) > maxNameLen {
		add("Exchange", fmt.Sprintf("(%d bytes)", len(c.Exchange)), "too long: AMQP allows 255 bytes")
	}
	if len(c.RoutingKey) > maxNameLen {
		add("RoutingKey", fmt.Sprintf("(%d bytes)", len(c.RoutingKey)), "too long: AMQP allows 255 bytes")
	}
	errs = append(errs, coreProblems(c.URL, c.Mandatory, c.Confirms, c.PubRetry, c.DialTimeout, c.CloseTimeout)...)
	return errors.Join(errs...)
}

// NewPublisher returns a Publisher for cfg, or every problem of cfg
// joined, each a [*ConfigError] (see [PublisherConfig.Validate]).
func NewPublisher[T any](cfg PublisherConfig[T]) (*Publisher[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core, err := newCore(cfg.URL, cfg.Exchange, cfg.Mandatory, cfg.Confirms, cfg.PubRetry, cfg.DialTimeout, cfg.CloseTimeout, cfg.Clock)
	if err != nil {
		return nil, err
	}
	core.name = "sluice publisher " + cfg.Exchange
	core.reopen = true
	return &Publisher[T]{cfg: cfg, core: core}, nil
}

// coreProblems returns the problems of the settings shared by every
// publisher, each a [*ConfigError].
func coreProblems(url string, mandatory bool, confirms Confirms, retry PubRetry, dialTimeout, closeTimeout time.Duration) []error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if url == "" {
		add("URL", `""`, "required: the broker's AMQP URI, such as amqp://user:password@host:5672/")
	} else if _, err := amqp.ParseURI(url); err != nil {
		add("URL", "(hidden)", err.Error())
	}
	if mandatory && !confirms.Enabled {
		add("Mandatory", true, "requires Confirms.Enabled: a returned message is matched to its publish by its confirm")
	}
	if confirms.Timeout < 0 {
		add("Confirms.Timeout", confirms.Timeout, "must not be negative")
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
func newCore(url, exchange string, mandatory bool, confirms Confirms, retry PubRetry, dialTimeout, closeTimeout time.Duration, clock clockwork.Clock) (*pubCore, error) {
	if err := errors.Join(coreProblems(url, mandatory, confirms, retry, dialTimeout, closeTimeout)...); err != nil {
		return nil, err
	}
	if confirms.Timeout == 0 {
		confirms.Timeout = DefaultConfirmTimeout
	}
	if retry.MaxRetry == 0 {
		retry.MaxRetry = DefaultPubRetries
	}
	if retry.Delay == 0 {
		retry.Delay = DefaultPubRetryDelay
	}
	if dialTimeout == 0 {
		dialTimeout = DefaultDialTimeout
	}
	if closeTimeout == 0 {
		closeTimeout = DefaultCloseTimeout
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &pubCore{url: url, exchange: exchange, mandatory: mandatory, confirms: confirms, retry: retry,
		dialTimeout: dialTimeout, closeTimeout: closeTimeout, clock: clock}, nil
}

// Open connects, puts the channel in confirm mode when confirms are on,
// and checks that the exchange exists. A refused connection is transient;
// a missing exchange is permanent.
func (p *Publisher[T]) Open(ctx context.Context) error { return p.core.open(ctx) }

// Write publishes item. See [Confirms] for when it returns, and
// [PubRetry] for what it retries by itself.
func (p *Publisher[T]) Write(ctx context.Context, item T) error {
	closes := p.core.closes.Load() // a Close from now on comes during this Write
	msg, err := p.cfg.Publishing(item)
	if err != nil {
		return resilience.MarkPermanent(err)
	}
	key := p.cfg.RoutingKey
	if p.cfg.Route != nil {
		key = p.cfg.Route(item)
	}
	return p.core.publishSince(ctx, closes, p.cfg.Exchange, key, msg)
}

// Resent returns how many Writes returned nil after PubRetry published
// their message again because an earlier attempt's connection was lost
// before its confirm came: the broker may have taken that attempt too, so
// each such message may be on the broker twice, as sent (a MessageId its
// Publishing gave lets a consumer tell).
func (p *Publisher[T]) Resent() int64 { return p.core.resent.Load() }

// Flush waits for the confirms of the messages sent without waiting (see
// [Confirms.WaitFor]), and fails if any was not confirmed.
func (p *Publisher[T]) Flush(ctx context.Context) error { return p.core.flush(ctx) }

// Close closes the connection. Messages whose confirms were not waited
// for and not flushed may be lost.
func (p *Publisher[T]) Close(context.Context) error { return p.core.close() }
