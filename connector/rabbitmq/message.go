package rabbitmq

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A Message is one delivery from a queue, as a [Source] emits it. The
// source acks or rejects it when the pipeline is done with it; user code
// never acks.
//
// A Message is a value: copies share Body and Headers, which must not be
// changed. It implements [deadletter.Correlated], so its envelope carries
// its delivery's id; an item derived from a Message can carry the same id
// (return the Message's CorrelationID from its own CorrelationID method)
// to take part in the broker's retry topology.
type Message struct {
	// Body is the message's payload.
	Body []byte `json:"body"`
	// Headers are the message's AMQP headers, the connector's own
	// included (see [HeaderAttempts]); nil when it has none.
	Headers amqp.Table `json:"headers,omitempty"`
	// Exchange and RoutingKey say how the message was published; after a
	// trip through the retry topology Exchange is q_retry.
	Exchange string `json:"exchange"`
	// RoutingKey is the key the message was published with.
	RoutingKey string `json:"routing_key"`
	// MessageID is the message-id property its publisher set; "" for
	// none.
	MessageID string `json:"message_id,omitempty"`
	// ContentType is the content-type property its publisher set, such
	// as application/json; "" for none.
	ContentType string `json:"content_type,omitempty"`
	// Timestamp is the timestamp property its publisher set; zero for
	// none.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Redelivered is the broker's flag: the message was delivered before,
	// to this or another consumer, and not acked (a consumer died, or a run
	// stopped first). A trip through the retry topology is a new delivery,
	// not a redelivery: see Retries.
	Redelivered bool `json:"redelivered"`
	// Retries counts the times the message went through the retry
	// topology: its HeaderRetries, or the x-death counts recorded for the
	// source's queue when it was dead-lettered into the topology some other
	// way, whichever is larger.
	Retries int `json:"retries"`

	d *delivery
}

// CorrelationID returns the id of the delivery: the queue, the source's
// channel session and the delivery tag. It is unique while the message is
// in flight and names it in dead-letter envelopes.
func (m Message) CorrelationID() string {
	if m.d == nil {
		return ""
	}
	return m.d.id
}

// xDeathCount returns the sum of the counts of the x-death entries of
// headers that name queue: how often the message was dead-lettered out of
// queue. A header of another shape counts 0.
func xDeathCount(headers amqp.Table, queue string) int {
	deaths, ok := headers["x-death"].([]any)
	if !ok {
		return 0
	}
	n := 0
	for _, d := range deaths {
		t, ok := d.(amqp.Table)
		if !ok {
			continue
		}
		if q, _ := t["queue"].(string); q != queue {
			continue
		}
		switch c := t["count"].(type) {
		case int64:
			n += int(c)
		case int32:
			n += int(c)
		case int:
			n += c
		}
	}
	return n
}

// The headers of a W3C trace context, as OpenTelemetry's propagators
// write them into a message.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// TraceHeaders returns the W3C trace context the message was published
// with, its traceparent and tracestate headers, when they are strings; nil
// when it has none. Give it to the source's node as
// pipeline.SourceTraceHeaders(rabbitmq.TraceHeaders), and a traced run
// links each attempt on the message to the publisher's span.
func TraceHeaders(m Message) map[string]string {
	var h map[string]string
	for _, k := range []string{HeaderTraceParent, HeaderTraceState} {
		if v, ok := m.Headers[k].(string); ok && v != "" {
			if h == nil {
				h = make(map[string]string, 2)
			}
			h[k] = v
		}
	}
	return h
}
