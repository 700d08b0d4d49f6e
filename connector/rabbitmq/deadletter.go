package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/deadletter"
)

// EnvelopeType is the type property of the messages a
// [DeadLetterPublisher] publishes.
const EnvelopeType = "sluice.deadletter.v1"

// A DeadLetterConfig configures a [DeadLetterPublisher]. URL and Exchange
// are required.
type DeadLetterConfig struct {
	// URL is the broker's AMQP URI. Required.
	URL string
	// Exchange receives the envelopes; it must exist, with a queue bound
	// for RoutingKey. Required.
	Exchange string
	// RoutingKey is the key of every envelope's message; "" is a valid
	// key.
	RoutingKey string
	// ConfirmTimeout bounds the wait for the broker's confirm of one
	// envelope. Default [DefaultConfirmTimeout].
	ConfirmTimeout time.Duration
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

// A DeadLetterPublisher is a [deadletter.Sink] that publishes each
// envelope as a JSON message to an exchange, persistent, mandatory and
// confirmed: Write returns only once the broker has the envelope, and an
// envelope no queue takes fails the write, so that the engine retries it
// and then fails the run rather than lose an item.
//
// It connects at its first Write (the engine neither opens nor closes a
// dead-letter sink); call Close when the pipeline is done. It is safe for
// concurrent use. Read the messages back with [deadletter.UnmarshalEnvelope].
type DeadLetterPublisher struct {
	cfg  DeadLetterConfig
	core *pubCore
}

// Validate reports every problem of c, joined, each a [*ConfigError];
// nil when c is valid. NewDeadLetterPublisher calls it.
func (c DeadLetterConfig) Validate() error {
	errs := coreProblems(c.URL, true, c.confirms(), c.PubRetry, c.DialTimeout, c.CloseTimeout)
	if c.Exchange == "" {
		errs = append(errs, &ConfigError{Field: "Exchange", Value: `""`, Reason: "required: the exchange that receives the envelopes"})
	}
	return errors.Join(errs...)
}

// confirms is how a DeadLetterPublisher publishes: mandatory, confirmed,
// and waiting for the confirm.
func (c DeadLetterConfig) confirms() Confirms {
	return Confirms{Enabled: true, WaitFor: true, Timeout: c.ConfirmTimeout}
}

// NewDeadLetterPublisher returns a DeadLetterPublisher for cfg, or every
// problem of cfg joined (see [DeadLetterConfig.Validate]).
func NewDeadLetterPublisher(cfg DeadLetterConfig) (*DeadLetterPublisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core, err := newCore(cfg.URL, cfg.Exchange, true, cfg.confirms(), cfg.PubRetry, cfg.DialTimeout, cfg.CloseTimeout, cfg.Clock)
	if err != nil {
		return nil, err
	}
	core.name = "sluice dead letters " + cfg.Exchange
	return &DeadLetterPublisher{cfg: cfg, core: core}, nil
}

// Write publishes env and waits for the broker's confirm.
func (d *DeadLetterPublisher) Write(ctx context.Context, env deadletter.Envelope) error {
	body, err := deadletter.MarshalEnvelope(env)
	if err != nil {
		return fmt.Errorf("rabbitmq: encode envelope: %w", err)
	}
	msg := amqp.Publishing{
		ContentType:   "application/json",
		DeliveryMode:  amqp.Persistent,
		Type:          EnvelopeType,
		CorrelationId: env.CorrelationID,
		Timestamp:     d.core.clock.Now(),
		Headers: amqp.Table{
			"x-sluice-pipeline":    env.Pipeline,
			"x-sluice-origin-node": env.OriginNode,
			"x-sluice-run-id":      env.RunID,
		},
		Body: body,
	}
	return d.core.publish(ctx, d.cfg.Exchange, d.cfg.RoutingKey, msg)
}

// Close closes the connection, if one is open.
func (d *DeadLetterPublisher) Close() error { return d.core.close() }
