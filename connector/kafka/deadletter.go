package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

// EnvelopeType is the value of the HeaderType header of the records a
// [DeadLetterPublisher] produces.
const EnvelopeType = "sluice.deadletter.v1"

// Headers of the records a [DeadLetterPublisher] produces, as the other
// connectors' dead-letter publishers write them.
const (
	HeaderType       = "Sluice-Type"
	HeaderPipeline   = "Sluice-Pipeline"
	HeaderOriginNode = "Sluice-Origin-Node"
	HeaderRunID      = "Sluice-Run-Id"
)

// DefaultDeadLetterAckTimeout is DeadLetterConfig.AckTimeout left at zero:
// the wait for the brokers' ack of one envelope.
const DefaultDeadLetterAckTimeout = 30 * time.Second

// A DeadLetterConfig configures a [DeadLetterPublisher]. Brokers and
// Topic are required.
type DeadLetterConfig struct {
	// Brokers are the seed brokers, "host:port". Required.
	Brokers []string
	// Topic receives the envelopes; it must exist (the publisher creates
	// no topic): a source's is [RetryTopics.DeadLetterTopicOf] its topic.
	// Required.
	Topic string
	// AckTimeout bounds the wait for the brokers' ack of one envelope,
	// on Clock; any positive value (the client's own delivery timeout
	// is AckTimeout, or a second when AckTimeout is shorter, the least
	// the client takes). Default [DefaultDeadLetterAckTimeout].
	AckTimeout time.Duration
	// DialTimeout bounds connecting to a broker. Default
	// [DefaultDialTimeout].
	DialTimeout time.Duration
	// CloseTimeout bounds the wait at Close for envelopes in flight
	// (Close does not wait for AckTimeout). Default
	// [DefaultCloseTimeout].
	CloseTimeout time.Duration
	// Dial connects to a broker; nil uses a net.Dialer.
	Dial func(ctx context.Context, network, host string) (net.Conn, error)
	// Clock is what the publisher's waits use; default the real clock.
	Clock clockwork.Clock
}

// A DeadLetterPublisher is a [deadletter.Sink] that produces each
// envelope as a JSON record to a topic, with acks from every in-sync
// replica on the idempotent producer, and waits for the ack: Write returns
// only once the topic has the envelope, and a topic that does not exist
// fails the write, so that the engine retries it and then fails the run
// rather than lose an item. A write whose ack does not come within
// AckTimeout fails as unknown (transient): the envelope may be stored, and
// the engine's retry of the write may store it twice.
//
// The record's key is the envelope's CorrelationID (for a [Message], its
// topic, partition and offset), so that the letters of one record keep
// their order in one partition; the headers HeaderType, HeaderPipeline,
// HeaderOriginNode and HeaderRunID say what it is without reading the
// body. Read the records back with [deadletter.UnmarshalEnvelope].
//
// It connects at its first Write (the engine neither opens nor closes a
// dead-letter sink); call Close when the pipeline is done. It is safe for
// concurrent use.
type DeadLetterPublisher struct {
	cfg DeadLetterConfig

	mu sync.RWMutex
	cl *kgo.Client // nil once closed
	// sent counts the produce requests cl wrote (see sentWatch).
	sent *sentWatch
}

// Validate reports every problem of c, joined, each a [*ConfigError]; nil
// when c is valid. NewDeadLetterPublisher calls it.
func (c DeadLetterConfig) Validate() error {
	var errs []error
	bad := func(field string, v any, why string) {
		errs = append(errs, &ConfigError{Field: field, Value: v, Reason: why})
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "[]", "required: at least one seed broker")
	}
	for i, b := range c.Brokers {
		if b == "" {
			bad(fmt.Sprintf("Brokers[%d]", i), `""`, "must not be empty")
		}
	}
	if c.Topic == "" {
		bad("Topic", `""`, "required: the topic that receives the envelopes")
	} else if why := topicNameProblem(c.Topic); why != "" {
		bad("Topic", c.Topic, why)
	}
	if c.AckTimeout < 0 {
		bad("AckTimeout", c.AckTimeout, "must not be negative")
	}
	if c.DialTimeout < 0 {
		bad("DialTimeout", c.DialTimeout, "must not be negative")
	}
	if c.CloseTimeout < 0 {
		bad("CloseTimeout", c.CloseTimeout, "must not be negative")
	}
	return errors.Join(errs...)
}

// NewDeadLetterPublisher returns a DeadLetterPublisher for cfg, or every
// problem of cfg joined (see [DeadLetterConfig.Validate]).
func NewDeadLetterPublisher(cfg DeadLetterConfig) (*DeadLetterPublisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = DefaultDeadLetterAckTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	sent := &sentWatch{}
	cl, err := kgo.NewClient(producerOpts(cfg.Brokers, cfg.AckTimeout, cfg.DialTimeout, cfg.Dial, sent)...)
	if err != nil {
		return nil, resilience.MarkPermanent(fmt.Errorf("kafka: dead-letter publisher of topic %q: %w", cfg.Topic, err))
	}
	return &DeadLetterPublisher{cfg: cfg, cl: cl, sent: sent}, nil
}

// producerOpts are the options of a client that produces the source's
// copies or dead letters: the idempotent producer (the client's default)
// with acks from every in-sync replica, no linger (each produce waits for
// its ack), and the given delivery timeout; sent counts its produce
// requests.
func producerOpts(brokers []string, ackTimeout, dialTimeout time.Duration,
	dial func(context.Context, string, string) (net.Conn, error), sent *sentWatch) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.WithHooks(sent),
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// The wait for the ack is on the caller's clock; the client
		// takes no delivery timeout under a second.
		kgo.RecordDeliveryTimeout(max(ackTimeout, minDeliveryTimeout)),
		kgo.DialTimeout(dialTimeout),
		// A copy keeps its record's partition number, modulo the count
		// of the topic it goes to (see copyPartitioner).
		kgo.RecordPartitioner(copyPartitioner()),
	}
	if dial != nil {
		opts = append(opts, kgo.Dialer(dial))
	}
	return opts
}

// copyPartitioner puts a record in the partition its Partition field
// names, modulo the partition count of its topic: a copy goes to the
// partition number of its record, so that a keyed record's copies, in a
// tier with the topic's partition count, stay with the other records of
// its key, and an unkeyed one's with its partition.
func copyPartitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			return int(max(r.Partition, 0)) % n
		}
	})
}

// Write produces env and waits for the brokers' ack.
func (d *DeadLetterPublisher) Write(ctx context.Context, env deadletter.Envelope) error {
	body, err := deadletter.MarshalEnvelope(env)
	if err != nil {
		return fmt.Errorf("kafka: encode envelope: %w", err)
	}
	rec := &kgo.Record{Topic: d.cfg.Topic, Value: body, Partition: -1, Headers: []kgo.RecordHeader{
		{Key: HeaderType, Value: []byte(EnvelopeType)},
		{Key: "Content-Type", Value: []byte("application/json")},
		{Key: HeaderPipeline, Value: []byte(env.Pipeline)},
		{Key: HeaderOriginNode, Value: []byte(env.OriginNode)},
		{Key: HeaderRunID, Value: []byte(env.RunID)},
	}}
	if env.CorrelationID != "" {
		rec.Key = []byte(env.CorrelationID)
		rec.Partition = int32(keyPartition(rec.Key))
	}
	// The read lock keeps Close from closing the client while the
	// envelope is handed to it, and no longer: Close does not wait for
	// the ack, which its client's close answers (unknown).
	d.mu.RLock()
	if d.cl == nil {
		d.mu.RUnlock()
		return resilience.MarkPermanent(fmt.Errorf("kafka: dead-letter publisher of topic %q is closed", d.cfg.Topic))
	}
	if err := produceAcked(ctx, d.cl, d.sent, d.cfg.Clock, d.cfg.AckTimeout, rec, d.mu.RUnlock); err != nil {
		return fmt.Errorf("kafka: dead letter to topic %q: %w", d.cfg.Topic, err)
	}
	return nil
}

// keyPartition spreads dead letters over partitions by their key, so
// that the letters of one record share one partition.
func keyPartition(key []byte) int {
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() & 0x7fffffff)
}

// Close waits, within CloseTimeout, for envelopes in flight, and closes
// the client: a Write whose envelope is still unanswered then fails as
// unknown (transient), the envelope maybe stored. A Write after Close
// fails, permanent.
func (d *DeadLetterPublisher) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.CloseTimeout)
	defer cancel()
	err := d.cl.Flush(ctx)
	d.cl.Close()
	d.cl = nil
	if err != nil {
		return fmt.Errorf("kafka: dead-letter publisher of topic %q: close: %w", d.cfg.Topic, err)
	}
	return nil
}

// An unknownError is a produce whose outcome is unknown: the record was
// sent and no answer came (the wait ended, the client closed), so a broker
// may store it. It is transient, and never the record's fault.
type unknownError struct {
	topic string
	err   error
}

func (e *unknownError) Error() string {
	return fmt.Sprintf("kafka: produce to topic %q: outcome unknown, the record may be stored: %v", e.topic, e.err)
}

func (e *unknownError) Unwrap() error { return e.err }

// isUnknown reports whether err is a produce whose outcome is unknown.
func isUnknown(err error) bool {
	var u *unknownError
	return errors.As(err, &u)
}

// produceAcked produces rec on cl, whose produce requests sent counts, and
// waits, at most timeout on clock, for the brokers' ack. handed, when not
// nil, is called once rec was handed to cl, before the wait. An error is
// an *unknownError when the record may be stored; otherwise no broker
// stored it.
func produceAcked(ctx context.Context, cl *kgo.Client, sent *sentWatch, clock clockwork.Clock, timeout time.Duration, rec *kgo.Record, handed func()) error {
	done := make(chan error, 1)
	mark := sent.mark()
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	if handed != nil {
		handed()
	}
	timer := clock.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return produceAnswer(ctx, rec.Topic, err, sent.sentSince(mark), sent.lostSince(mark))
	case <-ctx.Done():
	case <-timer.Chan():
	}
	select {
	case err := <-done:
		// The answer came with the end of the wait: it is the answer.
		return produceAnswer(ctx, rec.Topic, err, sent.sentSince(mark), sent.lostSince(mark))
	default:
	}
	why := context.Cause(ctx)
	if why == nil {
		why = fmt.Errorf("no ack within %s", timeout)
	}
	return resilience.MarkTransient(&unknownError{topic: rec.Topic, err: why})
}

// produceAnswer turns the client's answer to a produce into an error;
// sent says the client wrote a produce request since it took the record
// (see sentWatch), which makes a failure that may come after a stored
// send (mayBeStored) unknown; lost says an answer was lost since, which
// makes a refusal of the batch unknown too.
func produceAnswer(ctx context.Context, topic string, err error, sent, lost bool) error {
	switch {
	case err == nil:
		return nil
	case sent && mayBeStored(err), refusal(err) && lost:
		return resilience.MarkTransient(&unknownError{topic: topic, err: err})
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The client fails a record for its context only before it sent
		// it.
		return fmt.Errorf("kafka: produce to topic %q ended before it was sent: %w", topic, context.Cause(ctx))
	case errors.Is(err, kgo.ErrClientClosed):
		return resilience.MarkTransient(&unknownError{topic: topic, err: err})
	case errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries):
		// No produce request was written since the client took the
		// record (sent is false): no broker stored it.
		return resilience.MarkTransient(fmt.Errorf("kafka: produce to topic %q: not stored: %w", topic, err))
	default:
		return fmt.Errorf("kafka: produce to topic %q: %w", topic, err)
	}
}
