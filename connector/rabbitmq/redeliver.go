package rabbitmq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/deadletter"
)

// messageType is how deadletter.TypeOf names a Message.
var messageType = deadletter.TypeOf(Message{})

// Republishing returns the message that gives env's item back to a queue,
// as it was before it failed, for a re-drive:
//
//   - an item that is a [Message] (as the source emitted it, or its JSON
//     read back from a dead-letter file, whose ItemType names Message) gives
//     its Body, ContentType, MessageID, Timestamp and Headers, without the
//     headers of its earlier life (x-death, x-first-death-*,
//     x-last-death-*, x-delivery-count and the x-sluice-* story); read
//     back from JSON, an integer header is an int64 again, but JSON keeps
//     no other type: a float that is a whole number comes back an int64, a
//     float32 a float64, a []byte header the string of its base64, a
//     time.Time its RFC 3339 text and an amqp.Decimal a table of its
//     Scale and Value (a Message does not carry the other AMQP
//     properties);
//   - an item that is a []byte gives those bytes;
//   - any other item gives its JSON, with content type application/json.
//
// The message keeps env's CorrelationID, and is persistent. An item that
// was never encoded (ItemError) cannot be given back: Republishing returns
// an error.
func Republishing(env deadletter.Envelope) (amqp.Publishing, error) {
	if env.ItemError != "" {
		return amqp.Publishing{}, fmt.Errorf("rabbitmq: the item was not encoded when it was dead-lettered: %s", env.ItemError)
	}
	pub := amqp.Publishing{DeliveryMode: amqp.Persistent, CorrelationId: env.CorrelationID}
	raw, isRaw := env.Item.(json.RawMessage)
	switch it := env.Item.(type) {
	case Message:
		return fromMessage(pub, it), nil
	case *Message:
		if it != nil {
			return fromMessage(pub, *it), nil
		}
	case []byte:
		pub.Body = it
		return pub, nil
	}
	if isRaw {
		switch strings.TrimPrefix(env.ItemType, "*") {
		case messageType:
			var m Message
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			if err := d.Decode(&m); err != nil {
				return amqp.Publishing{}, fmt.Errorf("rabbitmq: the item says it is a %s: %w", messageType, err)
			}
			m.Headers, _ = headerTypes(m.Headers).(amqp.Table)
			return fromMessage(pub, m), nil
		case "[]uint8":
			var b []byte
			if err := json.Unmarshal(raw, &b); err != nil {
				return amqp.Publishing{}, fmt.Errorf("rabbitmq: the item says it is a []byte: %w", err)
			}
			pub.Body = b
			return pub, nil
		}
		pub.ContentType, pub.Body = "application/json", raw
		return pub, nil
	}
	body, err := deadletter.EncodeItem(env.Item, json.Marshal)
	if err != nil {
		return amqp.Publishing{}, err
	}
	pub.ContentType, pub.Body = "application/json", body
	return pub, nil
}

// headerTypes gives header values read back from JSON the types AMQP
// gives them: an integer is an int64 (not a float64 that would round a
// large one), another number a float64, a table an amqp.Table. A value
// that was a []byte is a string of its base64: JSON does not say which.
func headerTypes(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		t := amqp.Table{}
		for k, e := range x {
			t[k] = headerTypes(e)
		}
		return t
	case amqp.Table:
		t := amqp.Table{}
		for k, e := range x {
			t[k] = headerTypes(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = headerTypes(e)
		}
		return out
	}
	return v
}

func fromMessage(pub amqp.Publishing, m Message) amqp.Publishing {
	pub.Body, pub.ContentType, pub.MessageId, pub.Timestamp = m.Body, m.ContentType, m.MessageID, m.Timestamp
	pub.Headers = withoutLife(m.Headers)
	return pub
}

// withoutLife returns headers without those of a message's earlier life:
// the broker's (x-death, x-first-death-*, x-last-death-*, a quorum
// queue's x-delivery-count), the story the retry topology carries and the
// sequence header: the set the crash ledger leaves out of a message's
// identity (lifeHeader).
func withoutLife(h amqp.Table) amqp.Table {
	if len(h) == 0 {
		return nil
	}
	out := maps.Clone(h)
	for k := range out {
		if lifeHeader(k) || k == SeqHeader {
			delete(out, k)
		}
	}
	return out
}

// Unwrap returns the message that gives back the item of a dead letter
// that a [DeadLetterPublisher] published (its Type is [EnvelopeType]); any
// other delivery is given back as it is, with its properties, without the
// headers of its earlier life.
func Unwrap(d amqp.Delivery) (amqp.Publishing, error) {
	if d.Type == EnvelopeType {
		env, err := deadletter.UnmarshalEnvelope(d.Body)
		if err != nil {
			return amqp.Publishing{}, fmt.Errorf("rabbitmq: decode envelope: %w", err)
		}
		return Republishing(env)
	}
	return amqp.Publishing{
		Headers: withoutLife(d.Headers), ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp,
		Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}, nil
}
