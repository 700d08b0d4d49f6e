package nats

import (
	"encoding/json"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/deadletter"
)

// Republishing returns the message that gives env's item back to a stream
// as it was before it failed, for a re-drive: publish it (to its Subject,
// or set another) and a source of the stream emits it afresh.
//
//   - an item that is a [Message] (as the source emitted it, or its JSON
//     read back from a dead-letter file, whose ItemType names Message)
//     gives its Subject, Data and Header, without the headers of its
//     earlier life: the Sluice-* story and count of a counted copy, and
//     the Nats-* headers the server acts on (its Nats-Msg-Id would have
//     the stream's duplicate window drop the re-drive);
//   - an item that is a []byte gives those bytes, and no subject;
//   - any other item gives its JSON, and no subject.
//
// A poison letter's Message given back with its headers as they were
// would be a counted copy at its last count: the source would dead-letter
// it again at once, without running it. An item that was never encoded
// (ItemError) cannot be given back: Republishing returns an error.
func Republishing(env deadletter.Envelope) (*natsgo.Msg, error) {
	if env.ItemError != "" {
		return nil, fmt.Errorf("nats: the item was not encoded when it was dead-lettered: %s", env.ItemError)
	}
	switch it := env.Item.(type) {
	case Message:
		return fromMessage(it), nil
	case *Message:
		if it != nil {
			return fromMessage(*it), nil
		}
	case []byte:
		return &natsgo.Msg{Data: it}, nil
	}
	if raw, ok := env.Item.(json.RawMessage); ok {
		switch strings.TrimPrefix(env.ItemType, "*") {
		case messageType:
			var m Message
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("nats: the item says it is a %s: %w", messageType, err)
			}
			return fromMessage(m), nil
		case "[]uint8":
			var b []byte
			if err := json.Unmarshal(raw, &b); err != nil {
				return nil, fmt.Errorf("nats: the item says it is a []byte: %w", err)
			}
			return &natsgo.Msg{Data: b}, nil
		}
		return &natsgo.Msg{Data: raw}, nil
	}
	body, err := deadletter.EncodeItem(env.Item, json.Marshal)
	if err != nil {
		return nil, err
	}
	return &natsgo.Msg{Data: body}, nil
}

// fromMessage returns m as a message to publish, less the headers of its
// earlier life.
func fromMessage(m Message) *natsgo.Msg {
	msg := &natsgo.Msg{Subject: m.Subject, Data: m.Data}
	for k, vs := range m.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "sluice-") || strings.HasPrefix(lk, "nats-") {
			continue
		}
		if msg.Header == nil {
			msg.Header = natsgo.Header{}
		}
		msg.Header[k] = append([]string(nil), vs...)
	}
	return msg
}
