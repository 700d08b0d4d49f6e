package deadletter

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// MaxDepth is the deepest nesting of an item that [EncodeItem] encodes:
// the depth encoding/json reads back, and far below what would make an
// encoder's recursion overflow the stack, which no recover can catch.
const MaxDepth = 10000

// ErrTooDeep is the encoding error of an item nested deeper than
// [MaxDepth], or cyclic.
var ErrTooDeep = errors.New("deadletter: item nested too deep to encode, or cyclic")

// EncodeItem encodes item with enc (nil: JSON without HTML escaping, the
// file sink's default) for a dead-letter envelope, so that no item can
// crash the process: an item nested deeper than [MaxDepth] (or cyclic) is
// refused with [ErrTooDeep] before enc sees it, a panic in enc (or in an
// item's MarshalJSON) becomes an error, and so does a result that is not
// one JSON value. The result is compact JSON. A sink that writes envelopes
// as bytes calls it, and on error records the error in ItemError and
// [Describe]'s rendering in ItemText, as the file sink does.
func EncodeItem(item any, enc func(item any) ([]byte, error)) (json.RawMessage, error) {
	if enc == nil {
		enc = encodeJSON
	}
	if tooDeep(item) {
		return nil, ErrTooDeep
	}
	return encodeItem(item, enc)
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// tooDeep reports whether item nests deeper than MaxDepth the way
// encoding/json walks it: through pointers and interfaces (no level),
// exported fields (not those tagged "-"), slices, arrays and map values
// (a level each), not into values that marshal themselves. It walks without recursion, and visits a
// pointer, map or slice again only when it meets it deeper than before,
// so shared parts cost little and a cycle ends at MaxDepth.
func tooDeep(item any) bool {
	type frame struct {
		v     reflect.Value
		depth int
	}
	stack := []frame{{reflect.ValueOf(item), 0}}
	deepest := map[deepKey]int{}
	push := func(v reflect.Value, depth int) { stack = append(stack, frame{v, depth}) }
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		v := f.v
		if !v.IsValid() {
			continue
		}
		if f.depth > MaxDepth {
			return true
		}
		t := v.Type()
		if t.Kind() != reflect.Interface && (t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
			(v.CanAddr() && (reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)))) {
			// It encodes itself (encoding/json calls a pointer method only
			// on an addressable value).
			continue
		}
		switch v.Kind() {
		case reflect.Interface:
			if !v.IsNil() {
				push(v.Elem(), f.depth)
			}
		case reflect.Pointer, reflect.Map, reflect.Slice:
			if v.IsNil() || (v.Kind() != reflect.Pointer && flat(t.Elem())) {
				continue
			}
			// A slice is itself only with the same start, type and length:
			// buf[:0] and buf share a pointer and not their elements.
			k := deepKey{ptr: v.Pointer(), typ: t}
			if v.Kind() == reflect.Slice {
				k.len = v.Len()
			}
			if d, ok := deepest[k]; ok && d >= f.depth {
				continue
			}
			deepest[k] = f.depth
			switch v.Kind() {
			case reflect.Pointer:
				push(v.Elem(), f.depth) // no level of JSON
			case reflect.Map:
				for iter := v.MapRange(); iter.Next(); {
					push(iter.Value(), f.depth+1)
				}
			default:
				for i := range v.Len() {
					push(v.Index(i), f.depth+1)
				}
			}
		case reflect.Array:
			if !flat(t.Elem()) {
				for i := range v.Len() {
					push(v.Index(i), f.depth+1)
				}
			}
		case reflect.Struct:
			for i := range v.NumField() {
				sf := t.Field(i)
				if (sf.IsExported() || sf.Anonymous) && sf.Tag.Get("json") != "-" {
					push(v.Field(i), f.depth+1)
				}
			}
		}
	}
	return false
}

type deepKey struct {
	ptr uintptr
	typ reflect.Type
	len int
}

// flat reports whether values of t hold nothing to walk into.
func flat(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}

// errText is err's text; an Error method that panics gives a text that
// says so instead of crashing its caller.
func errText(err error) (text string) {
	if err == nil {
		return ""
	}
	defer func() {
		if v := recover(); v != nil {
			text = fmt.Sprintf("(the error's Error method panicked: %v)", v)
		}
	}()
	return err.Error()
}

// MarshalEnvelope returns env as one JSON object, for a sink that sends
// envelopes as messages (the broker connectors' dead-letter publishers):
// its error's text, and its item's type, are filled in when empty, and an
// item that cannot be encoded does not fail the envelope or crash the
// process (see [EncodeItem]): the item is left out, and ItemError and
// ItemText say why and what it was. [UnmarshalEnvelope] reads it back.
func MarshalEnvelope(env Envelope) ([]byte, error) {
	if env.ErrText == "" && env.Err != nil {
		env.ErrText = errText(env.Err)
	}
	if _, raw := env.Item.(json.RawMessage); env.ItemType == "" && !raw {
		env.ItemType = TypeOf(env.Item)
	}
	if env.ItemError == "" && env.Item != nil {
		raw, err := EncodeItem(env.Item, json.Marshal)
		if err != nil {
			env.ItemError = errText(err)
			env.ItemText = Describe(env.Item)
			env.Item = nil
		} else {
			env.Item = raw
		}
	}
	return json.Marshal(env)
}

// UnmarshalEnvelope reads an envelope that [MarshalEnvelope] wrote. Its
// Item is the item's JSON, a [json.RawMessage], to decode into the item's
// type; its Err is nil and ErrText holds the error's text.
func UnmarshalEnvelope(body []byte) (Envelope, error) {
	var w struct {
		Envelope
		Item json.RawMessage `json:"item"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return Envelope{}, err
	}
	env := w.Envelope
	env.Item = w.Item
	return env, nil
}
