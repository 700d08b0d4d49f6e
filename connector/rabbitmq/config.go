package rabbitmq

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// DefaultCrashAloneWait bounds how long a suspect of a crash waits for
	// the source to be idle, and how long it then runs alone (see
	// SourceConfig.CrashAloneWait).
	DefaultCrashAloneWait = 10 * time.Second
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
	// MaxDeliveries, when positive, guards against a poison message: one
	// that failed MaxDeliveries runs (its node's failure action said Fail,
	// node.Rejected), or that the broker dead-lettered out of the queue that
	// often, is not emitted again: the source writes it to the pipeline's
	// dead-letter sink, with an error matching [ErrPoison], and acks it,
	// whatever the nodes' failure actions. It needs the pipeline's
	// dead-letter sink (pipeline.WithDeadLetter): Open fails without one.
	//
	// To count, the source puts an item that a run left unsettled (Failed
	// or Rejected) back at the end of the queue as a copy that carries its
	// count (HeaderDeliveries), and acks the delivery, instead of
	// requeueing it; the failed run that brings the count to MaxDeliveries
	// dead-letters the message at once. A copy the broker refuses (a full
	// queue, headers too large) requeues the delivery, and its count is
	// kept in process. A delivery lost with a crashed consumer is not
	// counted: see docs/rabbitmq.md ("Poison messages"). 0 sets no limit.
	MaxDeliveries int
	// CrashLedger, when not empty, is the path of a file in which the
	// source keeps the ids of the messages it has in flight, so that a
	// message whose delivery ends the consumer's process (os.Exit, an
	// unrecovered panic in a goroutine, an OOM kill) is caught: after a
	// crash, each message that was in flight runs alone when it comes
	// back (for at most CrashAloneWait, so that nothing stalls; past it,
	// it runs beside others and a crash does not name it the culprit),
	// and a message that crashes the process while it runs alone is,
	// at its next delivery, written to the pipeline's dead-letter sink
	// with an error matching [ErrCrashed] (and [ErrPoison]) and acked,
	// without running. Its neighbours are never dead-lettered. It needs
	// the pipeline's dead-letter sink: Open fails without one. Each
	// consumer process needs a path of its own (Open fails while another
	// holds it); a restarted process must get the same path. See
	// docs/rabbitmq.md ("Messages that crash the consumer"). "" keeps no
	// ledger.
	CrashLedger string
	// CrashAloneWait bounds, on Clock, how long a suspect of a crash
	// waits for nothing else of the source to be in flight, and how long
	// it then runs alone, so that a pipeline which holds items until more
	// arrive (a Batch without linger, a count window, a join waiting for
	// its match) never stalls. Past it the suspect runs beside the others,
	// and a crash then does not name it the culprit: it stays a suspect.
	// Only with CrashLedger. Default [DefaultCrashAloneWait]; see
	// docs/rabbitmq.md ("Messages that crash the consumer").
	CrashAloneWait time.Duration
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
	// Durable makes the queue survive a broker restart; false, the
	// zero value, declares a transient queue.
	Durable bool
	// AutoDelete has the broker delete the queue once its last consumer
	// is gone; false keeps it.
	AutoDelete bool
	// Exclusive makes the queue private to the source's connection,
	// deleted when it closes; false lets any connection use it.
	Exclusive bool
	// Args are the queue's arguments, such as x-queue-type or
	// x-max-length. With the retry topology, x-dead-letter-exchange is set
	// by the connector and must not be given here.
	Args amqp.Table
}

// A RetryTopology is RabbitMQ's delayed redelivery: retries that outlive
// the process and hold no consumer while they wait. With Enabled, Open
// declares, from the queue's name q and its tiers (one per delay):
//
//	exchange q_dlx (fanout) ──▶ queue q_retry_<d1> (x-message-ttl = d1,
//	                                               x-dead-letter-exchange = q_retry)
//	                            queue q_retry_<d2> (x-message-ttl = d2, …)   …
//	exchange q_retry (fanout) ──▶ queue q
//
// and q dead-letters into q_dlx, which feeds the first tier. With the
// single Delay the one tier is named q_retry (no suffix); with Delays, the
// tiers are named by their delay, such as q_retry_10s or q_retry_1m.
//
// Two paths lead into the tiers, both as copies that the source publishes
// straight to a tier queue (and then acks the message), carrying the
// message's story in headers (see [HeaderAttempts]):
//
//   - the broker's retry: an item that failed transiently after the
//     in-process retries, and was dead-lettered through [Source.DeadLetter],
//     goes to the tier of its trip: the first trip to the first tier, the
//     second to the second, the last tier for every trip after. Past
//     MaxRetry trips the item goes to the pipeline's dead-letter sink, with
//     the story of every delivery, and is acked;
//   - the hand-off: with HandOffAfter, an item whose next in-process retry
//     would wait at least HandOffAfter goes to the tier of the smallest
//     delay not shorter than that wait (a wait longer than every tier stays
//     in process: no tier would honour it), and
//     its next delivery continues the in-process retries where they were
//     (pipeline.HandOffSource). It does not count as a trip.
//
// A copy that cannot be published fails the dead-letter write, and so the
// run, and the message goes back to q; a hand-off that cannot be published
// waits in process instead.
type RetryTopology struct {
	// Enabled declares the topology at Open and sends failed items
	// through it; false, the zero value, leaves retries to the pipeline
	// and ignores the other fields.
	Enabled bool
	// MaxRetry is how many times the broker redelivers one message; it must
	// be at least 1. MaxRetry = 3 allows 4 deliveries.
	MaxRetry int
	// Delay is the wait before each redelivery when there is one tier: the
	// retry queue's x-message-ttl, in whole milliseconds; at least 1 ms.
	// Set Delay or Delays, not both.
	Delay time.Duration
	// Delays are the tiers' waits, rising (such as 1s, 10s, 1m, 10m): trip
	// n waits Delays[n-1], and every trip past the last tier waits the last.
	// Each is a whole number of milliseconds, at least 1 ms; at most 16.
	Delays []time.Duration
	// HandOffAfter, when positive, hands the in-process retries that would
	// wait at least this long to the broker; 0 keeps every wait in process.
	HandOffAfter time.Duration
	// Durable makes both exchanges and the retry queues survive a broker
	// restart; false, the zero value, declares them transient.
	Durable bool
	// AutoDelete has the broker delete both exchanges and the retry
	// queues once they are unused; false keeps them.
	AutoDelete bool
	// Classifier decides which failures the broker retries; the zero value
	// is the default classifier. It judges the error under the pipeline's
	// own marks: a [resilience.RetryExhaustedError] is judged by the error of
	// its last attempt, and an error marked by [resilience.MarkRetried] by
	// the error it wraps, since those marks only stop the in-process layers
	// from multiplying retries.
	Classifier resilience.Classifier
}

// maxTiers bounds RetryTopology.Delays.
const maxTiers = 16

// tiers returns the waits of the retry queues, shortest first.
func (r *RetryTopology) tiers() []time.Duration {
	if len(r.Delays) > 0 {
		return r.Delays
	}
	return []time.Duration{r.Delay}
}

// tierName returns the name of the retry queue of queue that waits d: q_retry
// with a single Delay, q_retry_<d> with Delays.
func (r *RetryTopology) tierName(queue string, d time.Duration) string {
	if len(r.Delays) == 0 {
		return retryName(queue)
	}
	return retryName(queue) + "_" + shortDuration(d)
}

// RetryQueues returns the names of the retry queues r declares for
// queue, shortest delay first: queue_retry with the single Delay, one
// queue_retry_<delay> per tier with Delays (such as orders_retry_10s).
func (r RetryTopology) RetryQueues(queue string) []string {
	var names []string
	for _, d := range r.tiers() {
		names = append(names, r.tierName(queue, d))
	}
	return names
}

// tierForTrip returns the wait of a message's trip n (1 for its first).
func (r *RetryTopology) tierForTrip(n int) time.Duration {
	t := r.tiers()
	return t[min(max(n, 1), len(t))-1]
}

// tierForWait returns the shortest tier not shorter than d, or the
// longest.
func (r *RetryTopology) tierForWait(d time.Duration) time.Duration {
	t := r.tiers()
	for _, w := range t {
		if w >= d {
			return w
		}
	}
	return t[len(t)-1]
}

// shortDuration writes d in its largest whole unit: 1500ms, 10s, 1m, 2h.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// maxNameLen is AMQP's limit on a queue or exchange name, and a routing
// key: a short string, 255 bytes.
const maxNameLen = 255

// longestName returns the longest of the names declared for c's queue
// (the queue, and with the retry topology its q_dlx, q_retry and tier
// queues), and its length.
func (c *SourceConfig) longestName() (int, string) {
	names := []string{c.Queue}
	if c.Retry.Enabled {
		names = append(names, dlxName(c.Queue), retryName(c.Queue))
		for _, d := range c.Retry.tiers() {
			names = append(names, c.Retry.tierName(c.Queue, d))
		}
	}
	longest := ""
	for _, n := range names {
		if len(n) > len(longest) {
			longest = n
		}
	}
	return len(longest), longest
}

// The names the retry topology derives from a queue's name.
func dlxName(queue string) string   { return queue + "_dlx" }
func retryName(queue string) string { return queue + "_retry" }

// Validate reports every problem of c, joined, each a [*ConfigError];
// NewSource calls it. (connector/nats's SourceConfig has the same method.)
func (c SourceConfig) Validate() error {
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
	} else if n, name := c.longestName(); n > maxNameLen {
		// Refused before anything is declared: the broker would take the
		// queue and refuse a name derived from it halfway through.
		add("Queue", fmt.Sprintf("(%d bytes)", len(c.Queue)), fmt.Sprintf("too long: the name %q… is %d bytes, and AMQP allows 255 bytes", name[:min(len(name), 16)], n))
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
	if c.CrashAloneWait < 0 {
		add("CrashAloneWait", c.CrashAloneWait, "must not be negative; 0 takes DefaultCrashAloneWait")
	}
	if c.MaxDeliveries < 0 {
		add("MaxDeliveries", c.MaxDeliveries, "must not be negative; 0 sets no limit")
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
		// Every problem is reported: Delay beside Delays does not hide
		// Delays that do not rise.
		if len(r.Delays) > 0 && r.Delay != 0 {
			add("Retry.Delay", r.Delay, "set Delay or Delays, not both")
		}
		if len(r.Delays) > maxTiers {
			add("Retry.Delays", len(r.Delays), "at most 16 tiers")
		}
		switch {
		case len(r.Delays) > 0:
			for i, d := range r.Delays {
				field := "Retry.Delays[" + strconv.Itoa(i) + "]"
				switch {
				case d < time.Millisecond || d%time.Millisecond != 0:
					add(field, d, "must be a whole number of milliseconds, at least 1ms: it is a retry queue's x-message-ttl")
				case i > 0 && d <= r.Delays[i-1]:
					add(field, d, "must be longer than the tier before it: tiers rise, and each names its queue")
				}
			}
		case r.Delay < time.Millisecond:
			add("Retry.Delay", r.Delay, "must be at least 1ms: it is the retry queue's x-message-ttl in milliseconds")
		}
		if r.HandOffAfter < 0 {
			add("Retry.HandOffAfter", r.HandOffAfter, "must not be negative; 0 keeps every wait in process")
		} else if longest := slices.Max(r.tiers()); r.HandOffAfter > longest && longest > 0 {
			add("Retry.HandOffAfter", r.HandOffAfter, "must not exceed the longest tier ("+longest.String()+"): a wait is handed off only to a retry queue that waits at least as long, so no wait would ever be")
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
	if c.CrashAloneWait == 0 {
		c.CrashAloneWait = DefaultCrashAloneWait
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
