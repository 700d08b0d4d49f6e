package nats

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/resilience"
)

// Defaults of the settings left at zero.
const (
	// DefaultBatch is the most messages one source holds unsettled.
	DefaultBatch = 64
	// DefaultAckWait is how long the server waits for an ack before it
	// delivers a message again.
	DefaultAckWait = 30 * time.Second
	// DefaultPullWait is how long one pull request waits on the server for
	// messages before the source asks again.
	DefaultPullWait = 5 * time.Second
	// DefaultDialTimeout bounds connecting.
	DefaultDialTimeout = 10 * time.Second
	// DefaultCloseTimeout bounds the flush of the last acks at Close.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultDrainTimeout bounds a source's wait for its items in flight
	// after Stop.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultCrashAloneWait bounds how long a suspect of a crash waits for
	// the source to be idle, and how long it then runs alone (see
	// SourceConfig.CrashAloneWait).
	DefaultCrashAloneWait = 10 * time.Second
	// DefaultAckTimeout bounds the wait for one publish's PubAck.
	DefaultAckTimeout = 30 * time.Second
	// DefaultPubRetries is the retries of a publish that did not reach the
	// server.
	DefaultPubRetries = 3
	// DefaultPubRetryDelay is the wait before each of those retries.
	DefaultPubRetryDelay = 500 * time.Millisecond
)

// A SourceConfig configures a [Source]. URL, Stream and Consumer are
// required; every other zero value takes the default named in its
// comment.
type SourceConfig struct {
	// URL is the server's URL, such as nats://user:password@host:4222.
	// Required: the connector has no default server.
	URL string
	// Stream is the JetStream stream to consume. Required.
	Stream string
	// Declare, when not nil, creates Stream with these settings at Open
	// when it does not exist, and checks its subjects when it does. When
	// nil, Stream must exist; Open checks that it does.
	Declare *StreamDeclaration
	// Consumer is the name of the durable pull consumer. Open creates it
	// when it does not exist and checks, when it does, that AckWait,
	// MaxDeliver, BackOff and FilterSubject are those of this config.
	// Every process that consumes with the same name shares its work.
	// Required.
	Consumer string
	// FilterSubject, when set, makes the consumer take only the stream's
	// messages on this subject (wildcards allowed).
	FilterSubject string
	// AckWait is how long the server waits for a message's ack before it
	// delivers it again. The source keeps the messages it holds from
	// running out of it (see ProgressInterval); a process that dies stops
	// doing so, and its messages come back after AckWait. With BackOff the
	// server waits BackOff[0] instead. Default [DefaultAckWait].
	AckWait time.Duration
	// MaxDeliver is the consumer's limit on deliveries of one message; the
	// server stops delivering a message once it reached it, and leaves it
	// in the stream. 0 sets no limit. Required (positive) with Retry.
	MaxDeliver int
	// BackOff, when set, are the consumer's waits before the server
	// delivers again a message that was not acked: delivery n+1 waits
	// BackOff[n-1], the last repeated. It also gives the waits of the
	// broker's retry (see [BrokerRetry]). MaxDeliver must then exceed its
	// length (the server refuses BackOff with unlimited deliveries).
	BackOff []time.Duration
	// MaxAckPending is the consumer's limit on messages delivered and not
	// yet acked, across every process that shares it. 0 takes the
	// server's default (1000).
	MaxAckPending int
	// Batch is the most messages the source holds unsettled: it asks the
	// server for more only when it has room. Default [DefaultBatch].
	Batch int
	// PullWait is how long one pull request waits on the server for
	// messages. Default [DefaultPullWait]. A run that ends while its
	// request waits (a cancel, a drain, a Stop, a failure) gives back what
	// it holds with a nak delayed until the request would have expired:
	// those messages come back up to PullWait later, in real time.
	PullWait time.Duration
	// ProgressInterval is how often the source tells the server that it is
	// still working on each message it holds (an in-progress ack), so that
	// an item retried in process for longer than AckWait is not delivered
	// to another consumer meanwhile. Default a third of AckWait (of the
	// shortest BackOff wait with BackOff); it must be shorter than that wait.
	ProgressInterval time.Duration
	// Retry is the broker's delayed redelivery: see [BrokerRetry].
	Retry BrokerRetry
	// MaxDeliveries, when positive, guards against a poison message: one
	// that failed MaxDeliveries runs (its item's outcome was
	// node.Rejected) is not emitted again: the source writes it to the
	// pipeline's dead-letter sink, with an error matching [ErrPoison],
	// and terminates it, whatever the nodes' failure actions. The count is
	// carried in the message: after a failed run the source publishes a
	// copy that counts it (see [HeaderFailures]) and acks the original, so
	// it holds across processes; deliveries that ended otherwise (the run
	// ended first, a broker retry, a hand-off, a crash) count nothing. See
	// docs/nats.md ("Poison messages"). It needs the pipeline's
	// dead-letter sink (pipeline.WithDeadLetter): Open fails without one.
	// Open refuses it on a stream that cannot take the copy as it should:
	// a mirror, or a stream with MaxMsgsPerSubject (the copy would evict a
	// newer message of its subject). A copy the stream refuses otherwise
	// is counted in process. With MaxDeliver it must be below MaxDeliver.
	// 0 sets no limit.
	MaxDeliveries int
	// CrashLedger, when not empty, is the path of a file in which the
	// source keeps the ids (stream sequences) of the messages it holds, so
	// that a message whose delivery ends the consumer's process (os.Exit,
	// an unrecovered panic in a goroutine, an OOM kill) is caught: after a
	// crash, each message that was held runs alone when it comes back
	// (for at most CrashAloneWait, so that nothing stalls; past it, it runs
	// beside others and a crash does not name it the culprit), and a
	// message that crashes the process while it runs alone is, at its
	// next delivery, written to the pipeline's dead-letter sink with an
	// error matching [ErrCrashed] (and [ErrPoison]) and terminated,
	// without running. Its neighbours are never dead-lettered, and the
	// deliveries a crash cost them do not count toward MaxDeliveries. It
	// needs the pipeline's dead-letter sink: Open fails without one. Each
	// consumer process needs a path of its own (Open fails while another
	// holds it); a restarted process must get the same path. See
	// docs/nats.md ("Messages that crash the consumer"). "" keeps no
	// ledger.
	CrashLedger string
	// CrashAloneWait bounds, on Clock, how long a suspect of a crash
	// waits for nothing else of the source to be in flight, and how long
	// it then runs alone, so that a pipeline which holds items until more
	// arrive (a Batch without linger, a count window, a join waiting for
	// its match) never stalls. Past it the suspect runs beside the others,
	// and a crash then does not name it the culprit: it stays a suspect.
	// Only with CrashLedger. Default [DefaultCrashAloneWait]; see
	// docs/nats.md ("Messages that crash the consumer").
	CrashAloneWait time.Duration
	// DialTimeout bounds connecting. Default [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds the flush of the last acks at Close, and, on
	// Clock, Close's wait for the counted copies still to publish (see
	// MaxDeliveries): past it they give up, and their messages' failed
	// runs are counted in process. Close's context ends that wait too.
	// Default [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// DrainTimeout bounds how long Close waits, after [Source.Stop], for the
	// items in flight to finish so that they are acked. Default
	// [DefaultDrainTimeout].
	DrainTimeout time.Duration
	// Clock is what the connector's own waits use (the in-progress acks,
	// the drain); default the real clock.
	Clock clockwork.Clock
}

// A StreamDeclaration says how a source creates its stream.
type StreamDeclaration struct {
	// Subjects are the subjects the stream stores. Required.
	Subjects []string
	// Storage is file (the zero value) or memory.
	Storage jetstream.StorageType
	// Replicas is the stream's replicas in a cluster; 0 is 1.
	Replicas int
	// MaxAge, when positive, drops messages older than it.
	MaxAge time.Duration
	// Duplicates is the window in which the stream drops a message whose
	// Nats-Msg-Id it already stored; 0 takes the server's (2 minutes).
	Duplicates time.Duration
}

// A BrokerRetry is JetStream's delayed redelivery: retries that outlive
// the process and hold no worker while they wait. The source settles a
// message with a negative ack that carries a delay (NakWithDelay), and the
// server delivers it again after the delay, to this or another consumer.
//
// Two paths lead there:
//
//   - the broker's retry: an item that failed transiently after the
//     in-process retries, and was dead-lettered through [Source.DeadLetter],
//     is delivered again after the wait of its delivery: BackOff[n-1] for
//     its delivery n (the last repeated), or Delay without BackOff. Once
//     the server delivered it MaxDeliver times, the item goes to the
//     pipeline's dead-letter sink instead, and is terminated;
//   - the hand-off: with HandOffAfter, an item whose next in-process retry
//     would wait at least HandOffAfter is delivered again after that wait
//     (deadletter.HandOffSource), and its next delivery continues the
//     in-process retries where they were when this source gets it. With
//     BackOff, the server waits at least BackOff[n-1] - BackOff[0] after
//     a nak of delivery n, so a shorter hand-off waits that long.
type BrokerRetry struct {
	// Enabled lets the server redeliver failed items after a delay, as
	// described above; false, the zero value, leaves retries to the
	// pipeline and ignores the other fields.
	Enabled bool
	// Delay is the wait before each redelivery without BackOff. It must be
	// positive then.
	Delay time.Duration
	// HandOffAfter, when positive, hands the in-process retries that would
	// wait at least this long to the server; 0 keeps every wait in
	// process.
	HandOffAfter time.Duration
	// Classifier decides which failures the broker retries; the zero value
	// is the default classifier. It judges the error under the pipeline's
	// own marks, as the RabbitMQ connector's does.
	Classifier resilience.Classifier
}

// delay returns the wait before the delivery that follows delivery n.
func (c *SourceConfig) delay(n uint64) time.Duration {
	if len(c.BackOff) == 0 {
		return c.Retry.Delay
	}
	i := min(max(int(n), 1), len(c.BackOff)) - 1
	return c.BackOff[i]
}

// nakDelay returns the delay to send in the nak of delivery n for the
// server to deliver the message again after want. With BackOff, NATS
// (2.9) counts a nak's delay from the consumer's AckWait, BackOff[0], but
// expires it against the ack wait of delivery n, BackOff[n-1]: it waits
// delay + BackOff[n-1] - BackOff[0], which this takes off. When that
// difference exceeds want, the server's wait is the difference (the
// least delay it takes is 1ms).
func (c *SourceConfig) nakDelay(want time.Duration, n int) time.Duration {
	if len(c.BackOff) > 0 {
		want -= c.delay(uint64(n)) - c.ackWait()
	}
	return max(want, time.Millisecond)
}

// ackWait is the wait the server gives a message's first delivery.
func (c *SourceConfig) ackWait() time.Duration {
	if len(c.BackOff) > 0 {
		return c.BackOff[0]
	}
	return c.AckWait
}

// shortestAckWait is the shortest wait the server gives a delivery before
// it delivers the message again: delivery n waits BackOff[n-1].
func (c *SourceConfig) shortestAckWait() time.Duration {
	if len(c.BackOff) == 0 {
		return c.AckWait
	}
	return slices.Min(c.BackOff)
}

// Validate reports every problem of c, joined, each a [*ConfigError].
func (c SourceConfig) Validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	validateURL(c.URL, add)
	if c.Stream == "" {
		add("Stream", `""`, "required")
	} else if !validName(c.Stream) {
		add("Stream", c.Stream, "must not contain spaces, tabs, '.', '*', '>', '/' or '\\'")
	}
	if c.Consumer == "" {
		add("Consumer", `""`, "required: the durable consumer's name")
	} else if !validName(c.Consumer) {
		add("Consumer", c.Consumer, "must not contain spaces, tabs, '.', '*', '>', '/' or '\\'")
	}
	if d := c.Declare; d != nil {
		if len(d.Subjects) == 0 {
			add("Declare.Subjects", "[]", "required: the subjects the stream stores")
		}
		if d.Replicas < 0 {
			add("Declare.Replicas", d.Replicas, "must not be negative")
		}
		if d.MaxAge < 0 {
			add("Declare.MaxAge", d.MaxAge, "must not be negative")
		}
		if d.Duplicates < 0 {
			add("Declare.Duplicates", d.Duplicates, "must not be negative")
		}
	}
	if c.AckWait < 0 {
		add("AckWait", c.AckWait, "must not be negative")
	} else if c.AckWait > 0 && c.AckWait < time.Millisecond {
		add("AckWait", c.AckWait, "must be at least 1ms")
	}
	if c.MaxDeliver < 0 {
		add("MaxDeliver", c.MaxDeliver, "must not be negative; 0 sets no limit")
	}
	for i, d := range c.BackOff {
		if d < time.Millisecond {
			add("BackOff["+strconv.Itoa(i)+"]", d, "must be at least 1ms")
		}
	}
	if len(c.BackOff) > 0 && c.MaxDeliver >= 0 && c.MaxDeliver <= len(c.BackOff) {
		add("MaxDeliver", c.MaxDeliver, "must exceed len(BackOff) = "+strconv.Itoa(len(c.BackOff))+": the server refuses a consumer with BackOff whose deliveries are unlimited or do not outlast it")
	}
	if c.MaxAckPending < 0 {
		add("MaxAckPending", c.MaxAckPending, "must not be negative; 0 takes the server's default")
	}
	if c.Batch < 0 {
		add("Batch", c.Batch, "must not be negative; 0 takes the default")
	}
	if c.PullWait < 0 {
		add("PullWait", c.PullWait, "must not be negative")
	} else if c.PullWait > 0 && c.PullWait < 100*time.Millisecond {
		add("PullWait", c.PullWait, "must be at least 100ms")
	}
	if c.ProgressInterval < 0 {
		add("ProgressInterval", c.ProgressInterval, "must not be negative")
	} else if dc := c.withDefaults(); c.ProgressInterval > 0 && c.ProgressInterval >= dc.shortestAckWait() {
		w := dc.shortestAckWait()
		add("ProgressInterval", c.ProgressInterval, "must be shorter than the ack wait ("+w.String()+"), or the server delivers the message again first")
	}
	if c.MaxDeliveries < 0 {
		add("MaxDeliveries", c.MaxDeliveries, "must not be negative; 0 sets no limit")
	} else if c.MaxDeliveries > 0 && c.MaxDeliver > 0 && c.MaxDeliveries >= c.MaxDeliver {
		add("MaxDeliveries", c.MaxDeliveries, "must be below MaxDeliver ("+strconv.Itoa(c.MaxDeliver)+"): the server stops delivering the message before the guard sees it")
	}
	if r := c.Retry; r.Enabled {
		if c.MaxDeliver <= 0 {
			add("MaxDeliver", c.MaxDeliver, "must be positive with Retry: it is how many times the broker delivers one message")
		}
		if len(c.BackOff) == 0 && r.Delay <= 0 {
			add("Retry.Delay", r.Delay, "must be positive without BackOff: it is the wait before each redelivery")
		}
		if r.HandOffAfter < 0 {
			add("Retry.HandOffAfter", r.HandOffAfter, "must not be negative; 0 keeps every wait in process")
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"DialTimeout", c.DialTimeout}, {"CloseTimeout", c.CloseTimeout}, {"DrainTimeout", c.DrainTimeout}, {"CrashAloneWait", c.CrashAloneWait}} {
		if f.d < 0 {
			add(f.name, f.d, "must not be negative")
		}
	}
	return errors.Join(errs...)
}

// validateURL checks a server URL, or a comma-separated list of them.
func validateURL(u string, add func(field string, value any, reason string)) {
	if u == "" {
		add("URL", `""`, "required: the server's URL, such as nats://127.0.0.1:4222")
		return
	}
	for s := range strings.SplitSeq(u, ",") {
		p, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			add("URL", "(hidden)", "not a URL: "+strings.TrimPrefix(err.Error(), "parse "))
			return
		}
		switch p.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			add("URL", p.Redacted(), "the scheme must be nats, tls, ws or wss")
			return
		}
		if p.Host == "" {
			add("URL", p.Redacted(), "names no host")
			return
		}
	}
}

// validName reports whether s can name a stream or a consumer: the server
// puts both in API subjects.
func validName(s string) bool {
	return !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// withDefaults returns c with every zero setting at its default.
func (c SourceConfig) withDefaults() SourceConfig {
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.PullWait == 0 {
		c.PullWait = DefaultPullWait
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = c.shortestAckWait() / 3
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
