package deadletter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// wireEnvelope is an Envelope as one line of a dead-letter file. It exists
// so that the file format is fixed here, field by field and in this order,
// whatever the Go types of Envelope would do by themselves: the item is
// already-encoded JSON, times are UTC, and a layer the resilience package
// does not know still encodes.
type wireEnvelope struct {
	Item          json.RawMessage `json:"item"`
	ItemType      string          `json:"item_type,omitempty"`
	ItemError     string          `json:"item_error,omitempty"`
	ItemText      string          `json:"item_text,omitempty"`
	Error         string          `json:"error"`
	Pipeline      string          `json:"pipeline"`
	RunID         string          `json:"run_id"`
	OriginNode    string          `json:"origin_node"`
	DecisionNode  string          `json:"decision_node"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	Source        string          `json:"source,omitempty"`
	Position      []byte          `json:"position,omitempty"`
	Attempts      int             `json:"attempts"`
	History       []wireAttempt   `json:"history"`
	FirstFailure  time.Time       `json:"first_failure"`
	LastFailure   time.Time       `json:"last_failure"`
}

type wireAttempt struct {
	Time  time.Time     `json:"time"`
	Layer string        `json:"layer"`
	Retry int           `json:"retry"`
	Delay time.Duration `json:"delay"`
	Err   string        `json:"error"`
	Node  string        `json:"node,omitempty"`
}

// nullItem is what a file holds for an item that is nil or could not be
// encoded. It is never handed out: decodeLine makes a new slice.
var nullItem = json.RawMessage("null")

// encodeLine returns env as one line of a dead-letter file, newline
// included, and its key when it has a position (see keyOf). An item that
// enc cannot encode does not fail the line: the line records the encoding
// error and a text rendering of the item instead. The error is non-nil
// only when the envelope itself cannot be encoded, which takes a time
// outside the years 0 to 9999.
func encodeLine(env Envelope, enc func(any) ([]byte, error)) (line []byte, key heldKey, keyed bool, err error) {
	w := wireEnvelope{
		Item:          nullItem,
		ItemType:      env.ItemType,
		ItemError:     env.ItemError,
		ItemText:      env.ItemText,
		Error:         env.ErrText,
		Pipeline:      env.Pipeline,
		RunID:         env.RunID,
		OriginNode:    env.OriginNode,
		DecisionNode:  env.DecisionNode,
		CorrelationID: env.CorrelationID,
		Source:        env.Source,
		Position:      env.Position,
		Attempts:      env.Attempts,
		History:       make([]wireAttempt, len(env.History)),
		FirstFailure:  utc(env.FirstFailure),
		LastFailure:   utc(env.LastFailure),
	}
	if w.Error == "" && env.Err != nil {
		w.Error = errText(env.Err)
	}
	if _, raw := env.Item.(json.RawMessage); w.ItemType == "" && !raw {
		w.ItemType = TypeOf(env.Item)
	}
	// An envelope read back from a file whose item could not be encoded
	// keeps its record of that as it is.
	if env.ItemError == "" && env.Item != nil {
		raw, err := EncodeItem(env.Item, enc)
		if err != nil {
			w.ItemError = err.Error()
			w.ItemText = Describe(env.Item)
		} else {
			w.Item = raw
		}
	}
	for i, a := range env.History {
		w.History[i] = wireAttempt{Time: utc(a.Time), Layer: layerName(a.Layer), Retry: a.Retry, Delay: a.Delay, Err: a.Err, Node: a.Node}
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	// Items are data, not HTML: keep <, > and & readable for people and
	// byte-exact for tools.
	e.SetEscapeHTML(false)
	if err := e.Encode(w); err != nil {
		return nil, heldKey{}, false, err
	}
	key, keyed = keyOf(w.Pipeline, w.Source, w.Position, w.OriginNode, w.ItemType, w.Item, w.ItemError, w.ItemText)
	return buf.Bytes(), key, keyed, nil // Encode ends the line with '\n'
}

// encodeItem runs enc and checks its result, so that a panicking encoder
// or one that returns something other than one JSON value cannot break the
// line.
func encodeItem(item any, enc func(any) ([]byte, error)) (raw json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			raw, err = nil, fmt.Errorf("encoder panicked: %v", v)
		}
	}()
	b, err := enc(item)
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, errors.New("encoder returned invalid JSON")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// decodeLine parses one line of a dead-letter file. Item becomes a
// json.RawMessage ("null" for a null item, or for one that could not be
// encoded) and Err an error with the text of ErrText. A line with neither
// an item nor an item_error is refused.
func decodeLine(line []byte) (Envelope, error) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Envelope{}, errors.New("not a JSON object")
	}
	var w wireEnvelope
	if err := json.Unmarshal(trimmed, &w); err != nil {
		return Envelope{}, err
	}
	if w.Item == nil && w.ItemError == "" {
		// Every envelope written holds "item", null for a nil item, or
		// says why it could not (item_error). A line without either is
		// no dead letter (a hand-edited line, another JSON lines file):
		// read as a null item, a re-drive would send "null".
		return Envelope{}, errors.New(`no "item" and no "item_error": not a dead letter`)
	}
	env := Envelope{
		Item:          json.RawMessage("null"),
		ItemType:      w.ItemType,
		ErrText:       w.Error,
		Pipeline:      w.Pipeline,
		RunID:         w.RunID,
		OriginNode:    w.OriginNode,
		DecisionNode:  w.DecisionNode,
		CorrelationID: w.CorrelationID,
		Source:        w.Source,
		Position:      w.Position,
		Attempts:      w.Attempts,
		FirstFailure:  utc(w.FirstFailure),
		LastFailure:   utc(w.LastFailure),
		ItemError:     w.ItemError,
		ItemText:      w.ItemText,
	}
	if len(w.Item) > 0 {
		env.Item = w.Item
	}
	if w.Error != "" {
		env.Err = errors.New(w.Error)
	}
	if w.History != nil {
		env.History = make([]Attempt, len(w.History))
	}
	for i, a := range w.History {
		layer, err := parseLayer(a.Layer)
		if err != nil {
			return Envelope{}, fmt.Errorf("history[%d]: %w", i, err)
		}
		env.History[i] = Attempt{Time: utc(a.Time), Layer: layer, Retry: a.Retry, Delay: a.Delay, Err: a.Err, Node: a.Node}
	}
	return env, nil
}

// utc drops the monotonic reading and the zone, so that what is written is
// what is read back.
func utc(t time.Time) time.Time { return t.Round(0).UTC() }

// layerName is the layer's text; a kind unknown to resilience is written
// as its String, "RetryKind(7)", which parseLayer reads back.
func layerName(k resilience.RetryKind) string {
	if b, err := k.MarshalText(); err == nil {
		return string(b)
	}
	return k.String()
}

func parseLayer(s string) (resilience.RetryKind, error) {
	var k resilience.RetryKind
	if err := k.UnmarshalText([]byte(s)); err == nil {
		return k, nil
	}
	if n, ok := strings.CutPrefix(s, "RetryKind("); ok {
		if n, ok := strings.CutSuffix(n, ")"); ok {
			if v, err := strconv.Atoi(n); err == nil {
				return resilience.RetryKind(v), nil
			}
		}
	}
	return 0, fmt.Errorf("unknown layer %q", s)
}
