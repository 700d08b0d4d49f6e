package rabbitmq

import (
	"errors"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/resilience"
)

// Defaults of the settings left at zero.
const (
	// DefaultPrefetch is the unacked messages a source lets the broker send.
	DefaultPrefetch = 64
	// DefaultDialTimeout bounds connecting and the AMQP handshake.
	DefaultDialTimeout = 10 * time.Second
	// DefaultCloseTimeout bounds the closing handshake.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultDrainTimeout bounds a source's wait for its items in flight
	// after Stop.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultConfirmTimeout bounds the wait for one publisher confirm.
	DefaultConfirmTimeout = 30 * time.Second
	// DefaultPubRetries is the retries of a publish that did not reach the
	// broker.
	DefaultPubRetries = 3
	// DefaultPubRetryDelay is the wait before each of those retries.
	DefaultPubRetryDelay = 500 * time.Millisecond
)

// A SourceConfig configures a [Source]. URL and Queue are required; every
// other zero value takes the default named in its comment.
type SourceConfig struct {
	// URL is the broker's AMQP URI, such as
	// amqp://user:password@host:5672/vhost. Required: the connector has no
	// default broker.
	URL string
	// Queue is the queue to consume. Required.
	Queue string
	// Declare, when not nil, declares Queue with these settings at every
	// Open (adding the dead-letter exchange of the retry topology to its
	// arguments). When nil, Queue must exist; Open checks that it does.
	Declare *QueueDeclaration
	// Prefetch is how many deliveries the broker sends before waiting for
	// acks: the most messages one source has in flight. Default
	// [DefaultPrefetch].
	Prefetch int
	// ConsumerTag names the consumer on the broker; default a unique tag
	// made from the queue's name.
	ConsumerTag string
	// Retry is the broker's delayed redelivery: see [RetryTopology].
	Retry RetryTopology
	// DialTimeout bounds connecting and the AMQP handshake. Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds the closing handshake with the broker. Default
	// [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// DrainTimeout bounds how long Close waits, after [Source.Stop], for the
	// items in flight to finish so that they are acked. Default
	// [DefaultDrainTimeout].
	DrainTimeout time.Duration
	// Clock is what the connector's own waits use; default the real clock.
	Clock clockwork.Clock
}

// A QueueDeclaration says how a connector declares its queue.
type QueueDeclaration struct {
	Durable    bool
	AutoDelete bool
	Exclusive  bool
	// Args are the queue's arguments, such as x-queue-type or
	// x-max-length. With the retry topology, x-dead-letter-exchange is set
	// by the connector and must not be given here.
	Args amqp.Table
}

// A RetryTopology is RabbitMQ's delayed redelivery: retries that outlive
// the process and hold no consumer while they wait. With Enabled, Open
// declares, from the queue's name q:
//
//	exchange q_dlx (fanout)  ──▶  queue q_retry (x-message-ttl = Delay,
//	                                            x-dead-letter-exchange = q_retry)
//	exchange q_retry (fanout) ──▶ queue q
//
// and q dead-letters into q_dlx. An item that failed transiently after the
// in-process retries, and was dead-lettered through [Source.DeadLetter],
// is sent again through q_dlx, as a copy whose headers carry the calls
// it had (see [HeaderAttempts]), then acked; the broker holds it in q_retry
// for Delay and delivers it to q again. A copy that cannot be published
// fails the dead-letter write, and so the run, and the message goes back
// to q. Past MaxRetry trips the item goes to the pipeline's dead-letter
// sink, with the story of every delivery, and is acked.
type RetryTopology struct {
	Enabled bool
	// MaxRetry is how many times the broker redelivers one message; it must
	// be at least 1. MaxRetry = 3 allows 4 deliveries.
	MaxRetry int
	// Delay is the wait before each redelivery, the retry queue's
	// x-message-ttl, in whole milliseconds; at least 1 ms.
	Delay time.Duration
	// Durable and AutoDelete apply to both exchanges and the retry queue.
	Durable    bool
	AutoDelete bool
	// Classifier decides which failures the broker retries; the zero value
	// is the default classifier. It judges the error under the pipeline's
	// own marks: a [resilience.RetryExhaustedError] is judged by the error of
	// its last attempt, and an error marked by [resilience.MarkRetried] by
	// the error it wraps, since those marks only stop the in-process layers
	// from multiplying retries.
	Classifier resilience.Classifier
}

// The names the retry topology derives from a queue's name.
func dlxName(queue string) string   { return queue + "_dlx" }
func retryName(queue string) string { return queue + "_retry" }

// validate reports every problem of c, joined.
func (c *SourceConfig) validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if c.URL == "" {
		add("URL", `""`, "required: the broker's AMQP URI, such as amqp://user:password@host:5672/")
	} else if _, err := amqp.ParseURI(c.URL); err != nil {
		add("URL", "(hidden)", err.Error())
	}
	if c.Queue == "" {
		add("Queue", `""`, "required")
	}
	if c.Prefetch < 0 || c.Prefetch > 65535 {
		add("Prefetch", c.Prefetch, "must be in [0, 65535]; 0 takes the default")
	}
	if c.DialTimeout < 0 {
		add("DialTimeout", c.DialTimeout, "must not be negative")
	}
	if c.CloseTimeout < 0 {
		add("CloseTimeout", c.CloseTimeout, "must not be negative")
	}
	if c.DrainTimeout < 0 {
		add("DrainTimeout", c.DrainTimeout, "must not be negative")
	}
	if c.Declare != nil {
		if _, ok := c.Declare.Args["x-dead-letter-exchange"]; ok && c.Retry.Enabled {
			add("Declare.Args[x-dead-letter-exchange]", c.Declare.Args["x-dead-letter-exchange"], "set by the retry topology")
		}
		if err := c.Declare.Args.Validate(); err != nil {
			add("Declare.Args", "(table)", err.Error())
		}
	}
	if r := c.Retry; r.Enabled {
		if r.MaxRetry < 1 || r.MaxRetry > resilience.MaxRepeats {
			add("Retry.MaxRetry", r.MaxRetry, "must be in [1, 100]")
		}
		if r.Delay < time.Millisecond {
			add("Retry.Delay", r.Delay, "must be at least 1ms: it is the retry queue's x-message-ttl in milliseconds")
		}
		switch c.queueType() {
		case "quorum":
			if !r.Durable {
				add("Retry.Durable", false, "must be true for a quorum queue: the retry queue copies its type, and quorum queues are durable")
			}
			if r.AutoDelete {
				add("Retry.AutoDelete", true, "must be false for a quorum queue: the retry queue copies its type, and quorum queues cannot auto-delete")
			}
		case "stream":
			add("Retry.Enabled", true, "a stream queue neither rejects nor dead-letters messages")
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero setting at its default.
func (c SourceConfig) withDefaults() SourceConfig {
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// queueType is the x-queue-type the main queue is declared with, or
// "classic".
func (c *SourceConfig) queueType() string {
	if c.Declare != nil {
		if t, ok := c.Declare.Args["x-queue-type"].(string); ok && t != "" {
			return t
		}
	}
	return "classic"
}
