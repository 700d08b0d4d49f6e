package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	natsgo "github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/deadletter"
)

// EnvelopeType is the value of the HeaderType header of the messages a
// [DeadLetterPublisher] publishes.
const EnvelopeType = "sluice.deadletter.v1"

// Headers of the messages a [DeadLetterPublisher] publishes.
const (
	HeaderType       = "Sluice-Type"
	HeaderPipeline   = "Sluice-Pipeline"
	HeaderOriginNode = "Sluice-Origin-Node"
	HeaderRunID      = "Sluice-Run-Id"
)

// A DeadLetterConfig configures a [DeadLetterPublisher]. URL and Subject
// are required.
type DeadLetterConfig struct {
	// URL is the server's URL. Required.
	URL string
	// Subject receives the envelopes; a stream must store it. Required.
	Subject string
	// AckTimeout bounds the wait for the stream's PubAck of one envelope.
	// Default [DefaultAckTimeout].
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

// A DeadLetterPublisher is a [deadletter.Sink] that publishes each
// envelope as a JSON message to a subject that a stream stores, and waits
// for the PubAck: Write returns only once the stream has the envelope, and
// a subject no stream stores fails the write, so that the engine retries
// it and then fails the run rather than lose an item.
//
// It connects at its first Write (the engine neither opens nor closes a
// dead-letter sink); call Close when the pipeline is done. It is safe for
// concurrent use. Read the messages back with [deadletter.UnmarshalEnvelope]. The JSON
// is that of the RabbitMQ connector's dead-letter publisher.
type DeadLetterPublisher struct {
	cfg  DeadLetterConfig
	core *pubCore
}

// Validate reports every problem of c, joined, each a [*ConfigError];
// nil when c is valid. NewDeadLetterPublisher calls it.
func (c DeadLetterConfig) Validate() error {
	var errs []error
	if c.Subject == "" {
		errs = append(errs, &ConfigError{Field: "Subject", Value: `""`, Reason: "required: the subject that receives the envelopes"})
	}
	errs = append(errs, coreProblems(c.URL, c.AckTimeout, c.PubRetry, c.DialTimeout, c.CloseTimeout)...)
	return errors.Join(errs...)
}

// NewDeadLetterPublisher returns a DeadLetterPublisher for cfg, or every
// problem of cfg joined (see [DeadLetterConfig.Validate]).
func NewDeadLetterPublisher(cfg DeadLetterConfig) (*DeadLetterPublisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core, err := newCore(cfg.URL, cfg.AckTimeout, cfg.PubRetry, cfg.DialTimeout, cfg.CloseTimeout, cfg.Clock)
	if err != nil {
		return nil, err
	}
	core.name = "sluice dead letters " + cfg.Subject
	return &DeadLetterPublisher{cfg: cfg, core: core}, nil
}

// Write publishes env and waits for the stream's PubAck.
func (d *DeadLetterPublisher) Write(ctx context.Context, env deadletter.Envelope) error {
	body, err := deadletter.MarshalEnvelope(env)
	if err != nil {
		return fmt.Errorf("nats: encode envelope: %w", err)
	}
	h := natsgo.Header{}
	h.Set(HeaderType, EnvelopeType)
	h.Set("Content-Type", "application/json")
	h.Set(HeaderPipeline, env.Pipeline)
	h.Set(HeaderOriginNode, env.OriginNode)
	h.Set(HeaderRunID, env.RunID)
	return d.core.publish(ctx, &natsgo.Msg{Subject: d.cfg.Subject, Header: h, Data: body})
}

// Close closes the connection, if one is open.
func (d *DeadLetterPublisher) Close() error { return d.core.close() }
