package nats

import (
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/deadletter"
)

// A Message is one delivery from a stream, as a [Source] emits it. The
// source acks, naks or terminates it when the pipeline is done with it;
// user code never does.
//
// A Message is a value: copies share Data and Header, which must not be
// changed. It implements [deadletter.Correlated], so its envelope carries
// the message's stream and sequence; an item derived from a Message can
// carry the same id (return the Message's CorrelationID from its own
// CorrelationID method) to take part in the broker's retry.
type Message struct {
	// Subject is the subject the message was published to.
	Subject string `json:"subject"`
	// Data is the message's payload.
	Data []byte `json:"data"`
	// Header are the message's headers, such as Nats-Msg-Id; nil when it
	// has none.
	Header natsgo.Header `json:"header,omitempty"`
	// Stream and Sequence name the message in its stream: they stay the
	// same across its deliveries, and across the copies that a source
	// with MaxDeliveries publishes after a failed run (see
	// [HeaderFailures]).
	Stream string `json:"stream"`
	// Sequence is the message's sequence number in Stream: that of the
	// message first published, for a copy.
	Sequence uint64 `json:"sequence"`
	// Deliveries is the server's count of this message's deliveries to the
	// consumer, this one included (1 the first time), plus those of its
	// earlier copies. The server's count is not exact: a delivery into a
	// pull request the source gave up may be counted, or set back.
	Deliveries int `json:"deliveries"`
	// Timestamp is when the stream stored the message.
	Timestamp time.Time `json:"timestamp,omitzero"`

	d *delivery
}

// messageType is how deadletter.TypeOf names a Message.
var messageType = deadletter.TypeOf(Message{})

// MsgID returns the message's Nats-Msg-Id header: the id its publisher
// gave it for the stream's duplicate window, "" for none. For a counted
// copy it is the first message's (HeaderMsgID).
func (m Message) MsgID() string {
	if _, ok := copyFor(m.Header, m.Stream); ok {
		// The copy's own Nats-Msg-Id names the copy, not the message.
		return m.Header.Get(HeaderMsgID)
	}
	return m.Header.Get(jetstream.MsgIDHeader)
}

// CorrelationID returns the message's stream and stream sequence, such as
// "orders/42": the same for every delivery of the message, and unique in
// its stream.
func (m Message) CorrelationID() string {
	if m.Stream == "" {
		return ""
	}
	return m.Stream + "/" + strconv.FormatUint(m.Sequence, 10)
}

// describeMsg names a message by its Nats-Msg-Id, else by its sequence.
func describeMsg(m Message) string {
	if id := m.MsgID(); id != "" {
		return strconv.Quote(id)
	}
	return m.CorrelationID()
}

// TraceHeaders returns the W3C trace context the message was published
// with, its traceparent and tracestate headers; nil when it has none. Give
// it to the source's node as pipeline.SourceTraceHeaders(nats.TraceHeaders),
// and a traced run links each attempt on the message to the publisher's
// span.
func TraceHeaders(m Message) map[string]string {
	var h map[string]string
	for k, vs := range m.Header {
		// NATS headers keep the case they were written in: an
		// OpenTelemetry HeaderCarrier writes "Traceparent".
		for _, w := range []string{"traceparent", "tracestate"} {
			if strings.EqualFold(k, w) && len(vs) > 0 && vs[0] != "" {
				if h == nil {
					h = make(map[string]string, 2)
				}
				h[w] = vs[0]
			}
		}
	}
	return h
}
