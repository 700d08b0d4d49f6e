package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// Defaults of the publisher's settings left at zero.
const (
	// DefaultAckTimeout bounds the wait for the brokers' ack of one record.
	DefaultAckTimeout = 30 * time.Second
	// DefaultPubRetries is the retries of a produce that never reached a
	// broker.
	DefaultPubRetries = 3
	// DefaultPubRetryDelay is the wait before each of those retries.
	DefaultPubRetryDelay = 500 * time.Millisecond
	// DefaultMaxRecordBytes is the largest record a publisher sends: Kafka's
	// own default limit of a record batch (message.max.bytes), less the
	// batch's overhead.
	DefaultMaxRecordBytes = 1_000_000
)

// ErrOutcomeUnknown is matched by the error of a Write whose record may
// have been stored, or not: the produce request was sent and its answer
// never came (the Write's context ended, AckTimeout passed, the publisher
// was closed). A Write that fails so is not safe to count as failed: a
// retry may store the record twice (see [Publisher]).
var ErrOutcomeUnknown = errors.New("kafka: produce outcome unknown")

// ErrRecordTooLarge is matched by the error of a Write whose record is
// larger than PublisherConfig.MaxRecordBytes, or than the broker takes.
// It is permanent.
var ErrRecordTooLarge = errors.New("kafka: record too large")

// A ProduceError is a record that a Publisher could not store, or whose
// fate it does not know (Unknown).
type ProduceError struct {
	// Topic is the record's topic.
	Topic string
	// Unknown is true when the record may have been stored all the same;
	// the error then matches [ErrOutcomeUnknown].
	Unknown bool
	// Err is the cause: the client's or the broker's error, or the
	// context's cause.
	Err error
}

// Error names the topic and says whether the record may have been stored.
func (e *ProduceError) Error() string {
	if e.Unknown {
		return fmt.Sprintf("kafka: produce to topic %q: outcome unknown, the record may have been stored: %v", e.Topic, e.Err)
	}
	return fmt.Sprintf("kafka: produce to topic %q: %v", e.Topic, e.Err)
}

// Unwrap returns the cause.
func (e *ProduceError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrOutcomeUnknown] and the outcome is
// unknown.
func (e *ProduceError) Is(target error) bool { return e.Unknown && target == ErrOutcomeUnknown }

// PubRetry configures the publisher's own retry of a produce that never
// reached a broker: the client gave up on it before it tried to send it
// (it could not learn the topic's leader within DeliveryTimeout), or
// after the broker refused it with an error that says it did not store
// it. franz-go fails a record of the idempotent producer only then: a
// record it tried to send on a connection that broke stays with the
// client, which sends it again until a broker answers, and the Write ends
// unknown at AckTimeout. Each
// retry produces the record anew. When the retries run out the error is
// marked with [resilience.MarkRetried], so that the pipeline's layers do
// not multiply them; with PubRetry off such an error is transient, for
// the pipeline's item retry. A produce whose outcome is unknown is never
// retried here. It is the NATS and RabbitMQ connectors' PubRetry, with
// the same meaning and defaults.
type PubRetry struct {
	// Enabled turns the publisher's own retry on; false, the zero value,
	// fails the produce at once, with a transient error for the
	// pipeline's item retry.
	Enabled bool
	// MaxRetry is the number of retries; MaxRetry = 3 allows 4 attempts.
	// Default [DefaultPubRetries].
	MaxRetry int
	// Delay is the wait before each retry, on the publisher's Clock.
	// Default [DefaultPubRetryDelay].
	Delay time.Duration
}

// A PublisherConfig configures a [Publisher] of items of type T. Brokers
// and Record are required, and Topic unless every record names its own.
type PublisherConfig[T any] struct {
	// Brokers are the seed brokers, as host:port. Required.
	Brokers []string
	// Topic is the topic of every record whose Topic is empty.
	Topic string
	// Record turns an item into the record to produce: its Key, Value,
	// Headers and, when set, Topic and Timestamp (other fields are
	// ignored). Records of one key go to one partition (the client's
	// default partitioner hashes the key), so they are stored in the
	// order they were written; a record without key goes to any
	// partition. An error fails the item permanently. Required.
	Record func(item T) (*kgo.Record, error)
	// AckTimeout bounds, on Clock, the wait for the brokers' ack of one
	// record; past it the outcome is unknown (a transient
	// [*ProduceError] matching [ErrOutcomeUnknown]). Default
	// [DefaultAckTimeout].
	AckTimeout time.Duration
	// DeliveryTimeout bounds, in real time (it is the client's
	// RecordDeliveryTimeout), how long the client keeps trying to send a
	// record that it could not send (no broker reachable, a leader that
	// moved): past it the record fails as never sent, for PubRetry, when
	// the client wrote no produce request since it took the record, and
	// as unknown otherwise (franz-go fails so a batch whose first send
	// was stored with its answer lost, once a resend was refused as
	// retryable). The client takes no less
	// than a second. Default AckTimeout, or a second when AckTimeout is
	// shorter; it must not exceed AckTimeout, else the wait on Clock ends
	// first and calls unknown a record that was never sent.
	DeliveryTimeout time.Duration
	// PubRetry retries a produce that never reached a broker; the zero
	// value does not.
	PubRetry PubRetry
	// MaxRecordBytes is the largest record (key, value and headers) a
	// Write sends; a larger one fails permanently with an error matching
	// [ErrRecordTooLarge]. It must not exceed the topic's
	// max.message.bytes, which refuses it otherwise; above 100 MiB the
	// client's largest request is raised to fit it, and the brokers'
	// socket.request.max.bytes must take it too. At most 1 GiB less
	// 1 KiB. Default [DefaultMaxRecordBytes].
	MaxRecordBytes int
	// DialTimeout bounds connecting to a broker. Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds, in real time, Close's wait for the records in
	// flight to be acked. Default [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// Dial, when set, opens the connections to the brokers in place of a
	// net.Dialer.
	Dial func(ctx context.Context, network, host string) (net.Conn, error)
	// Clock is what the publisher's own waits use (AckTimeout, the
	// PubRetry delays); default the real clock.
	Clock clockwork.Clock
}

// A Publisher is a [node.Sink] that produces each item as a Kafka record
// and waits for the brokers' ack: an item is delivered only once every
// in-sync replica stored it (acks=all). It implements Open and Close for
// the pipeline's lifecycle, and is safe for concurrent use, so it can run
// under Parallel or Keyed: concurrent Writes share the client's batches.
//
// The producer is idempotent (franz-go's default): a produce request the
// client sends again after a lost answer is stored once. Records of one
// key are stored in the order their Writes began; Writes of one key that
// run at once have no order between them, so a pipeline that needs the
// order gives the sink Keyed by the record's key (or no parallelism).
//
// Delivery is at least once. A Write whose answer never came fails with a
// [*ProduceError] matching [ErrOutcomeUnknown] (counted by
// [Publisher.Unknown]): the record may be stored, and producing it again
// (an item retry, a run again) may store it twice, since Kafka's
// idempotence covers the client's own resends only. The sinks fed by a
// Publisher's topic should therefore be idempotent; exactly-once output
// needs [NewExactlyOnce].
type Publisher[T any] struct {
	cfg  PublisherConfig[T]
	core *pubCore
}

// Validate reports every problem of c, joined, each a [*ConfigError]; nil
// when c is valid. NewPublisher calls it.
func (c PublisherConfig[T]) Validate() error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if c.Record == nil {
		add("Record", "nil", "required: it turns an item into a record")
	}
	errs = append(errs, pubProblems(c.Brokers, c.AckTimeout, c.PubRetry, c.MaxRecordBytes, c.DialTimeout, c.CloseTimeout)...)
	ack := c.AckTimeout
	if ack == 0 {
		ack = DefaultAckTimeout
	}
	if c.DeliveryTimeout < 0 || c.DeliveryTimeout > 0 && c.DeliveryTimeout < minDeliveryTimeout {
		add("DeliveryTimeout", c.DeliveryTimeout, "must be 0 (the default) or at least a second")
	} else if c.DeliveryTimeout > 0 && ack > 0 && c.DeliveryTimeout > ack {
		add("DeliveryTimeout", c.DeliveryTimeout, fmt.Sprintf("must not exceed AckTimeout (%s)", ack))
	}
	return errors.Join(errs...)
}

// pubProblems returns the problems of the settings shared by every
// producer of the connector, each a [*ConfigError].
func pubProblems(brokers []string, ackTimeout time.Duration, retry PubRetry, maxBytes int, dialTimeout, closeTimeout time.Duration) []error {
	var errs []error
	add := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	if len(brokers) == 0 {
		add("Brokers", "[]", "required: at least one seed broker, as host:port")
	}
	for i, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			add(fmt.Sprintf("Brokers[%d]", i), fmt.Sprintf("%q", b), "must be host:port")
		}
	}
	if ackTimeout < 0 {
		add("AckTimeout", ackTimeout, "must not be negative")
	}
	if retry.MaxRetry < 0 || retry.MaxRetry > resilience.MaxRepeats {
		add("PubRetry.MaxRetry", retry.MaxRetry, "must be in [0, 100]; 0 takes the default")
	}
	if retry.Delay < 0 {
		add("PubRetry.Delay", retry.Delay, "must not be negative")
	}
	if maxBytes < 0 || maxBytes > maxRecordBytesLimit {
		add("MaxRecordBytes", maxBytes, fmt.Sprintf("must be in [0, %d]; 0 takes the default", maxRecordBytesLimit))
	}
	if dialTimeout < 0 {
		add("DialTimeout", dialTimeout, "must not be negative")
	}
	if closeTimeout < 0 {
		add("CloseTimeout", closeTimeout, "must not be negative")
	}
	return errs
}

// minDeliveryTimeout is the shortest RecordDeliveryTimeout the client
// takes.
const minDeliveryTimeout = time.Second

// maxRecordBytesLimit is the largest MaxRecordBytes: the client's largest
// batch (1 GiB) less room for the batch's own bytes.
const maxRecordBytesLimit = 1<<30 - batchOverhead

// batchOverhead is room for a record batch's header and one record's own
// fields beside its key, value and headers.
const batchOverhead = 1024

// defaultBrokerWriteBytes is the client's default largest request
// (kgo.BrokerMaxWriteBytes), and requestOverhead room for a produce
// request's own bytes around one batch.
const (
	defaultBrokerWriteBytes = 100 << 20
	requestOverhead         = 1024
)

// NewPublisher returns a Publisher for cfg, or every problem of cfg
// joined, each a [*ConfigError] (see [PublisherConfig.Validate]). It
// does not connect: Open does.
func NewPublisher[T any](cfg PublisherConfig[T]) (*Publisher[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core := newPubCore(cfg.Brokers, cfg.Topic, cfg.AckTimeout, cfg.PubRetry, cfg.MaxRecordBytes, cfg.DialTimeout, cfg.CloseTimeout, cfg.Dial, cfg.Clock)
	if cfg.DeliveryTimeout > 0 {
		core.deliveryTimeout = cfg.DeliveryTimeout
	}
	return &Publisher[T]{cfg: cfg, core: core}, nil
}

// Open creates the client and checks that a broker answers; an
// unreachable cluster is a transient error.
func (p *Publisher[T]) Open(ctx context.Context) error { return p.core.open(ctx) }

// Write produces item's record and waits for its ack. See [PubRetry] for
// what it retries by itself, and [ErrOutcomeUnknown] for an answer that
// never came. A cancelled ctx ends the wait: the record, if it was sent,
// may still be stored, and the error says so.
func (p *Publisher[T]) Write(ctx context.Context, item T) error {
	rec, err := p.cfg.Record(item)
	if err != nil {
		return resilience.MarkPermanent(fmt.Errorf("kafka: publisher of topic %q: Record: %w", p.cfg.Topic, err))
	}
	if rec == nil {
		return resilience.MarkPermanent(fmt.Errorf("kafka: publisher of topic %q: Record returned a nil record", p.cfg.Topic))
	}
	return p.core.produce(ctx, rec, nil)
}

// Unknown returns how many Writes ended without knowing whether their
// record was stored (their errors match [ErrOutcomeUnknown]). A
// publisher cannot count the duplicates that such records became when
// they were written again: Kafka's idempotent producer stores a record
// produced anew as a new record and does not say it had one like it.
func (p *Publisher[T]) Unknown() int64 { return p.core.unknown.Load() }

// Retries returns how many produces PubRetry sent again after the client
// failed them as never sent.
func (p *Publisher[T]) Retries() int64 { return p.core.retries.Load() }

// Close waits, within CloseTimeout and ctx, for the records in flight to
// be acked, and closes the client. A Write after Close fails with
// [ErrNotOpen], permanent, until Open is called again.
func (p *Publisher[T]) Close(ctx context.Context) error { return p.core.close(ctx) }

// pubCore produces records on one client; it is the untyped heart of
// [Publisher].
type pubCore struct {
	brokers      []string
	topic        string
	ackTimeout   time.Duration
	retry        PubRetry
	maxBytes     int
	dialTimeout  time.Duration
	closeTimeout time.Duration
	// deliveryTimeout is the client's RecordDeliveryTimeout; default
	// ackTimeout.
	deliveryTimeout time.Duration
	dial            func(ctx context.Context, network, host string) (net.Conn, error)
	clock           clockwork.Clock
	unknown         atomic.Int64
	retries         atomic.Int64
	// sent counts the produce requests the client wrote, so that a
	// failure the client calls "before it was sent" is checked.
	sent sentWatch

	// mu guards cl: a Write holds it shared while it hands a record to
	// the client, so that Close never closes the client under a produce
	// (a record handed to a closed client would fail as closed, unknown
	// though it was never sent).
	mu sync.RWMutex
	cl *kgo.Client

	// closeMu guards closing and aloneCancel: Close cuts the wait of a
	// record to be produced alone (which holds mu) instead of waiting
	// for it.
	closeMu     sync.Mutex
	closing     bool
	aloneCancel context.CancelCauseFunc
}

func newPubCore(brokers []string, topic string, ackTimeout time.Duration, retry PubRetry, maxBytes int, dialTimeout, closeTimeout time.Duration,
	dial func(ctx context.Context, network, host string) (net.Conn, error), clock clockwork.Clock) *pubCore {
	c := &pubCore{brokers: brokers, topic: topic, ackTimeout: ackTimeout, retry: retry, maxBytes: maxBytes,
		dialTimeout: dialTimeout, closeTimeout: closeTimeout, dial: dial, clock: clock}
	if c.ackTimeout == 0 {
		c.ackTimeout = DefaultAckTimeout
	}
	c.deliveryTimeout = max(c.ackTimeout, minDeliveryTimeout)
	if c.retry.MaxRetry == 0 {
		c.retry.MaxRetry = DefaultPubRetries
	}
	if c.retry.Delay == 0 {
		c.retry.Delay = DefaultPubRetryDelay
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultMaxRecordBytes
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
	return c
}

// options are the client options of a publisher: the idempotent producer
// (the client's default) with acks from every in-sync replica, no linger
// (a Write waits for its ack, so lingering would only add latency), and
// the delivery timeout and batch limit of the config.
func (c *pubCore) options() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(c.deliveryTimeout),
		kgo.ProducerBatchMaxBytes(int32(c.maxBytes + batchOverhead)),
		kgo.DialTimeout(c.dialTimeout),
		kgo.WithHooks(&c.sent),
	}
	if w := c.maxBytes + batchOverhead + requestOverhead; w > defaultBrokerWriteBytes {
		// The client refuses a batch limit above its largest request
		// (100 MiB by default): raise that, within its own 1 GiB, so
		// that every MaxRecordBytes Validate takes opens. (The client
		// then fits a batch to the request, less the request's header.)
		opts = append(opts, kgo.BrokerMaxWriteBytes(int32(min(w, 1<<30))))
	}
	if c.dial != nil {
		opts = append(opts, kgo.Dialer(c.dial))
	}
	return opts
}

// open creates the client unless one is open, and pings the cluster.
func (c *pubCore) open(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cl != nil {
		return nil
	}
	cl, err := kgo.NewClient(c.options()...)
	if err != nil {
		return resilience.MarkPermanent(fmt.Errorf("kafka: publisher of topic %q: %w", c.topic, err))
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return resilience.MarkTransient(fmt.Errorf("kafka: publisher of topic %q: no broker answers: %w", c.topic, err))
	}
	c.cl = cl
	return nil
}

// produce stores rec, retrying under PubRetry a produce that never
// reached a broker. admit, when not nil, runs before each attempt hands
// the record to the client, with the client's lock held (so that nobody
// ends a transaction in between); its error ends the produce.
func (c *pubCore) produce(ctx context.Context, rec *kgo.Record, admit func() error) error {
	topic := rec.Topic
	if topic == "" {
		topic = c.topic
	}
	if topic == "" {
		return resilience.MarkPermanent(errors.New("kafka: publisher: the record has no Topic and the config none either"))
	}
	if n := recordBytes(rec); n > c.maxBytes {
		return resilience.MarkPermanent(&ProduceError{Topic: topic,
			Err: fmt.Errorf("%w: %d bytes of key, value and headers, above MaxRecordBytes (%d)", ErrRecordTooLarge, n, c.maxBytes)})
	}
	alone := false
	var lastNotSent error
	for attempt := 1; ; attempt++ {
		err := c.attempt(ctx, topic, rec, alone, admit)
		if err == nil {
			return nil
		}
		if alone && errors.Is(err, ErrNotOpen) {
			// The broker refused the batch the record shared, storing
			// none of it, and the publisher closed before the record
			// was produced alone: never stored, and not its fault.
			return resilience.MarkBlameless(resilience.MarkTransient(&ProduceError{Topic: topic,
				Err: fmt.Errorf("not sent: its batch was refused as too large, and the publisher closed before it was produced alone: %w", ErrNotOpen)}))
		}
		var refused *refusedLargeError
		if errors.As(err, &refused) {
			if alone {
				// Refused alone: the record itself is too large.
				return resilience.MarkPermanent(refused.err)
			}
			// The broker refused the whole batch the record shared, and
			// stored none of it: the record may be small, blamed for a
			// neighbour. Only a refusal of the record alone says so.
			alone = true
			attempt--
			continue
		}
		if lastNotSent != nil && errors.Is(err, ErrNotOpen) {
			// Closed while the Write waited to retry a record that
			// never reached a broker: still never sent, and not the
			// item's fault.
			return resilience.MarkBlameless(resilience.MarkTransient(fmt.Errorf("%w (the publisher closed before its retry: %w)", lastNotSent, ErrNotOpen)))
		}
		var notSent *notSentError
		if !errors.As(err, &notSent) {
			return err
		}
		// A record that never reached a broker failed for the cluster's
		// sake, not its own.
		err = notSent.err
		lastNotSent = err
		if !c.retry.Enabled {
			return resilience.MarkBlameless(resilience.MarkTransient(err))
		}
		if attempt > c.retry.MaxRetry {
			return resilience.MarkBlameless(resilience.MarkRetried(fmt.Errorf("kafka: produce gave up after %d attempts: %w", attempt, err), attempt))
		}
		if werr := broker.Wait(ctx, c.clock, c.retry.Delay); werr != nil {
			return werr
		}
		c.retries.Add(1)
	}
}

// recordBytes is the size of rec's key, value and headers, each header
// with the lengths of its key and value as the record encodes them (so
// that many small headers cannot pass it and be refused by the client).
func recordBytes(rec *kgo.Record) int {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return n
}

// varintLen is the size of n as a record's zig-zag varint.
func varintLen(n int) int {
	u, l := uint64(n)<<1, 1
	for ; u >= 0x80; u >>= 7 {
		l++
	}
	return l
}

// A notSentError is a produce that the client failed before a broker
// stored it; produce retries it under PubRetry.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// A refusedLargeError is a produce the broker refused as too large
// (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE): the batch the record was
// in, maybe with others, was not stored. produce sends the record again
// alone to learn whether it is the one too large.
type refusedLargeError struct{ err error }

func (e *refusedLargeError) Error() string { return e.err.Error() }
func (e *refusedLargeError) Unwrap() error { return e.err }

// attempt produces a copy of rec once (the client writes into the record
// it is given) and waits for its ack. Alone, it holds every other Write
// off and waits for the records in flight first, so that the record is
// in a batch of its own.
func (c *pubCore) attempt(ctx context.Context, topic string, rec *kgo.Record, alone bool, admit func() error) error {
	out := &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp,
		Headers: append([]kgo.RecordHeader(nil), rec.Headers...)}
	done := make(chan error, 1)
	if alone {
		c.mu.Lock()
		defer c.mu.Unlock()
	} else {
		c.mu.RLock()
	}
	if admit != nil {
		if err := admit(); err != nil {
			if !alone {
				c.mu.RUnlock()
			}
			return err
		}
	}
	cl := c.cl
	if cl == nil {
		if !alone {
			c.mu.RUnlock()
		}
		return resilience.MarkPermanent(fmt.Errorf("kafka: produce to topic %q: the publisher was not opened, or was closed: %w", topic, ErrNotOpen))
	}
	// wait is what the wait for the ack ends on beside its timer: ctx,
	// and for a record produced alone Close too, which cuts the wait
	// (the Write holds mu, which Close takes).
	wait := ctx
	if alone {
		cut, stopCut := c.aloneCut(ctx)
		defer stopCut()
		wait = cut
		fctx, stop := c.flushContext(cut)
		err := cl.Flush(fctx)
		stop()
		if err != nil {
			// Nothing of this record was stored: the broker refused it.
			if ctx.Err() != nil {
				return fmt.Errorf("kafka: produce to topic %q ended before it was sent alone: %w", topic, context.Cause(ctx))
			}
			if cause := context.Cause(fctx); errors.Is(cause, ErrNotOpen) {
				return cause
			}
			return &notSentError{err: &ProduceError{Topic: topic,
				Err: fmt.Errorf("not sent: its batch was refused as too large, and the records in flight did not clear within AckTimeout (%s) for it to be produced alone", c.ackTimeout)}}
		}
	}
	// The record's context is ctx: the client fails the record with it
	// when ctx ends before the record is sent, and, while a send of it
	// is unanswered, waits for the broker's answer whatever ctx does.
	// After a resend answered with a retryable refusal it may fail it
	// again, though an earlier send was stored: answer asks the watch.
	mark := c.sent.mark()
	cl.Produce(ctx, out, func(_ *kgo.Record, err error) { done <- err })
	if !alone {
		c.mu.RUnlock()
	}

	timer := c.clock.NewTimer(c.ackTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return c.answer(ctx, topic, err, mark)
	case <-wait.Done():
	case <-timer.Chan():
	}
	// An answer that came with the end of the wait is still the answer.
	select {
	case err := <-done:
		return c.answer(ctx, topic, err, mark)
	default:
	}
	c.unknown.Add(1)
	if ctx.Err() != nil {
		return &ProduceError{Topic: topic, Unknown: true, Err: context.Cause(ctx)}
	}
	if wait.Err() != nil {
		// Close cut the wait of a record produced alone: it was sent,
		// and its answer had not come.
		return resilience.MarkBlameless(resilience.MarkTransient(&ProduceError{Topic: topic, Unknown: true,
			Err: errors.New("the publisher closed before the broker answered")}))
	}
	return resilience.MarkBlameless(resilience.MarkTransient(&ProduceError{Topic: topic, Unknown: true,
		Err: fmt.Errorf("no ack within AckTimeout (%s)", c.ackTimeout)}))
}

// aloneCut returns ctx, cut by Close with a cause matching ErrNotOpen:
// the waits of a record produced alone, which holds every other Write
// off, and Close too, for the records in flight before it and for its
// ack. stop releases it.
func (c *pubCore) aloneCut(ctx context.Context) (_ context.Context, stop func()) {
	cut, cancel := context.WithCancelCause(ctx)
	c.closeMu.Lock()
	if c.closing {
		cancel(errAloneClosed)
	}
	c.aloneCancel = cancel
	c.closeMu.Unlock()
	return cut, func() {
		c.closeMu.Lock()
		c.aloneCancel = nil
		c.closeMu.Unlock()
		cancel(nil)
	}
}

// flushContext bounds the wait of a record to be produced alone for the
// records in flight before it: cut (see aloneCut) and AckTimeout on the
// publisher's clock. stop releases it.
func (c *pubCore) flushContext(cut context.Context) (_ context.Context, stop func()) {
	fctx, cancel := context.WithCancelCause(cut)
	timer := c.clock.AfterFunc(c.ackTimeout, func() { cancel(nil) })
	return fctx, func() {
		timer.Stop()
		cancel(nil)
	}
}

// errAloneClosed ends the wait of a record to be produced alone when
// Close runs.
var errAloneClosed = fmt.Errorf("kafka: the publisher closed: %w", ErrNotOpen)

// answer turns the client's answer to a produce into the Write's error;
// mark is what the client's sentWatch counted when the record was handed
// to it. A failure that may come after its batch was stored (see
// sentWatch, mayBeStored) is of unknown outcome when a produce request
// was written since, never "not sent".
func (c *pubCore) answer(ctx context.Context, topic string, err error, mark sentMark) error {
	sent := c.sent.sentSince(mark)
	switch {
	case err == nil:
		return nil
	case sent && mayBeStored(err):
		c.unknown.Add(1)
		if ctx.Err() != nil {
			return &ProduceError{Topic: topic, Unknown: true, Err: fmt.Errorf("%w (the Write's context: %w)", err, context.Cause(ctx))}
		}
		return resilience.MarkBlameless(resilience.MarkTransient(&ProduceError{Topic: topic, Unknown: true,
			Err: fmt.Errorf("%w (a produce request was written since the record was handed to the client)", err)}))
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// No produce request was written since the record was handed
		// over (sent is false).
		if ctx.Err() != nil {
			return fmt.Errorf("kafka: produce to topic %q ended before it was sent: %w", topic, context.Cause(ctx))
		}
		// The Write's context lives: the client failed every record of
		// the partition that was not sent yet because the first record
		// of their batch was cancelled, another Write's.
		return &notSentError{err: &ProduceError{Topic: topic,
			Err: fmt.Errorf("not sent: a record batched with it was cancelled: %w", err)}}
	case errors.Is(err, kgo.ErrClientClosed):
		c.unknown.Add(1)
		return resilience.MarkBlameless(resilience.MarkTransient(&ProduceError{Topic: topic, Unknown: true, Err: err}))
	case errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries):
		// No produce request was written since the record was handed
		// over (sent is false): no broker stored it.
		return &notSentError{err: &ProduceError{Topic: topic, Err: err}}
	case refusal(err) && c.sent.lostSince(mark):
		// The refusal answers one send of the batch; an earlier one,
		// its answer lost, may have been stored.
		c.unknown.Add(1)
		return resilience.MarkBlameless(resilience.MarkTransient(&ProduceError{Topic: topic, Unknown: true,
			Err: fmt.Errorf("%w (refused after the answer of a produce request was lost: an earlier send of its batch may have been stored)", err)}))
	case errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge):
		return &refusedLargeError{err: &ProduceError{Topic: topic, Err: fmt.Errorf("%w: %w", ErrRecordTooLarge, err)}}
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return resilience.MarkPermanent(&ProduceError{Topic: topic, Err: fmt.Errorf("no such topic: %w", err)})
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Retriable {
		// Either no produce request was written since the record was
		// handed over (sent is false), and the code is one a metadata
		// answer carried (no leader), or it is CORRUPT_MESSAGE, the one
		// retryable refusal, with no answer lost meanwhile: the batch
		// was damaged on its way and not stored (unless an earlier send
		// was stored and answered in doubt, which the watch cannot see:
		// see sentWatch). Never sent, and the cluster's fault.
		return &notSentError{err: &ProduceError{Topic: topic, Err: err}}
	}
	if errors.As(err, &ke) {
		return resilience.MarkPermanent(&ProduceError{Topic: topic, Err: err})
	}
	if errors.Is(err, kgo.ErrAborting) {
		return &ProduceError{Topic: topic, Err: err}
	}
	// A client-side error other than those above: franz-go fails a
	// record with its load error (no leader, no connection, no producer
	// ID) when no request of its batch is in flight. No produce request
	// was written since the record was handed over (sent is false): no
	// broker stored it, and it failed for the cluster's sake.
	return &notSentError{err: &ProduceError{Topic: topic, Err: err}}
}

// close flushes the records in flight, within CloseTimeout and ctx, and
// closes the client.
func (c *pubCore) close(ctx context.Context) error {
	// A record waiting to be produced alone holds mu: cut its wait
	// rather than wait for it.
	c.closeMu.Lock()
	c.closing = true
	if c.aloneCancel != nil {
		c.aloneCancel(errAloneClosed)
	}
	c.closeMu.Unlock()
	c.mu.Lock()
	cl := c.cl
	c.cl = nil
	c.mu.Unlock()
	c.closeMu.Lock()
	c.closing = false
	c.closeMu.Unlock()
	if cl == nil {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, c.closeTimeout)
	defer cancel()
	err := cl.Flush(fctx)
	cl.Close()
	if err != nil {
		return fmt.Errorf("kafka: publisher of topic %q: records still in flight at Close: %w", c.topic, err)
	}
	return nil
}
