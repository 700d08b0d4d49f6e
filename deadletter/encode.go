package deadletter

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of an item that [EncodeItem] encodes:
// the depth encoding/json reads back, and far below what would make an
// encoder's recursion overflow the stack, which no recover can catch.
const MaxDepth = 10000

// ErrTooDeep is the encoding error of an item nested deeper than
// [MaxDepth], or cyclic.
var ErrTooDeep = errors.New("deadletter: item nested too deep to encode, or cyclic")

// ErrLossy is the encoding error of an item that JSON would not give back
// as it is, so that a re-drive would turn it into another item: one with a
// string that is not valid UTF-8, anywhere in it (each bad byte would come
// back as U+FFFD). The default JSON encoding refuses such an item, which
// then goes in its envelope as [Envelope.ItemText] with
// [Envelope.ItemError] saying why; a type that marshals itself, or an
// encoder of your own ([WithEncoder]), is trusted with what it keeps.
// What encoding/json leaves out by its own rules (unexported fields,
// fields tagged `json:"-"`) is not the item's JSON, and comes back empty.
var ErrLossy = errors.New("deadletter: JSON would not give the item back as it is")

// EncodeItem encodes item with enc (nil: JSON without HTML escaping, the
// file sink's default) for a dead-letter envelope, so that no item can
// crash the process: an item nested deeper than [MaxDepth] (or cyclic) is
// refused with [ErrTooDeep] before enc sees it, a panic in enc (or in an
// item's MarshalJSON) becomes an error, and so does a result that is not
// one JSON value. With a nil enc, an item that JSON would not give back
// as it is is refused with [ErrLossy]. The result is compact JSON. A sink
// that writes envelopes as bytes calls it, and on error records the error
// in ItemError and [Describe]'s rendering in ItemText, as the file sink
// does.
func EncodeItem(item any, enc func(item any) ([]byte, error)) (json.RawMessage, error) {
	strict := enc == nil
	if strict {
		enc = encodeJSON
	}
	return encodeChecked(item, enc, strict)
}

// encodeChecked is EncodeItem; strict refuses an item that enc, the JSON
// of encoding/json, would not give back as it is.
func encodeChecked(item any, enc func(item any) ([]byte, error), strict bool) (json.RawMessage, error) {
	if err := walk(item, strict, false); err != nil {
		if errors.Is(err, ErrTooDeep) {
			// Its text is the same whatever the order; walked again, a
			// wide map that holds itself would cost a second walk of
			// its entries at every depth down to MaxDepth.
			return nil, err
		}
		// Walked again in the order of map keys: which of several bad
		// parts is found first must not change from one write of an item
		// to the next, as the error is part of the letter's key (see
		// dedup.go). Only a refused item pays for the sorting.
		return nil, walk(item, strict, true)
	}
	return encodeItem(item, enc)
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// walk returns ErrTooDeep when item nests deeper than MaxDepth the way
// encoding/json walks it: through pointers and interfaces (no level),
// exported fields (not those tagged "-"), slices, arrays and map values
// (a level each), not into values that marshal themselves. It walks
// without recursion, and visits a pointer, map or slice again only when it
// meets it deeper than before, so shared parts cost little and a cycle
// ends at MaxDepth. When strict, it returns an error matching ErrLossy for
// the first part of item that encoding/json would not give back as it is.
// sorted visits map entries in the order of their keys (see mapEntries),
// so that the error it returns is the same for equal items.
func walk(item any, strict, sorted bool) error {
	type frame struct {
		v     reflect.Value
		depth int
	}
	stack := []frame{{reflect.ValueOf(item), 0}}
	deepest := map[deepKey]int{}
	// entries sorts each map once: a cycle meets the same map at every
	// depth down to MaxDepth.
	var entries func(v reflect.Value) [][2]reflect.Value
	if sorted {
		sortedOf := map[deepKey][][2]reflect.Value{}
		entries = func(v reflect.Value) [][2]reflect.Value {
			k := deepKey{ptr: v.Pointer(), typ: v.Type()}
			es, ok := sortedOf[k]
			if !ok {
				es = mapEntries(v)
				sortedOf[k] = es
			}
			return es
		}
	}
	push := func(v reflect.Value, depth int) { stack = append(stack, frame{v, depth}) }
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		v := f.v
		if !v.IsValid() {
			continue
		}
		if f.depth > MaxDepth {
			return ErrTooDeep
		}
		t := v.Type()
		if t.Kind() != reflect.Interface && marshalsItself(t, v.CanAddr()) {
			// It encodes itself (encoding/json calls a pointer method only
			// on an addressable value).
			continue
		}
		switch v.Kind() {
		case reflect.String:
			if strict && !utf8.ValidString(v.String()) {
				return lossy("a %s is not valid UTF-8", t)
			}
		case reflect.Interface:
			if !v.IsNil() {
				push(v.Elem(), f.depth)
			}
		case reflect.Pointer, reflect.Map, reflect.Slice:
			if v.IsNil() {
				continue
			}
			if strict {
				if err := badStrings(v, entries); err != nil {
					return err
				}
			}
			if v.Kind() != reflect.Pointer && flat(t.Elem()) {
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
				if entries != nil {
					// Pushed last first, so that the first key is
					// visited first.
					es := entries(v)
					for i := len(es) - 1; i >= 0; i-- {
						push(es[i][1], f.depth+1)
					}
					continue
				}
				for iter := v.MapRange(); iter.Next(); {
					push(iter.Value(), f.depth+1)
				}
			default:
				for i := range v.Len() {
					push(v.Index(i), f.depth+1)
				}
			}
		case reflect.Array:
			if strict {
				if err := badStrings(v, entries); err != nil {
					return err
				}
			}
			if !flat(t.Elem()) {
				for i := range v.Len() {
					push(v.Index(i), f.depth+1)
				}
			}
		case reflect.Struct:
			for i := range v.NumField() {
				sf := t.Field(i)
				if sf.Tag.Get("json") != "-" && (sf.IsExported() || sf.Anonymous && promotes(sf.Type)) {
					push(v.Field(i), f.depth+1)
				}
			}
		}
	}
	return nil
}

// marshalsItself reports whether encoding/json encodes a value of t with
// its own method; addressable, whether it may call a pointer method.
func marshalsItself(t reflect.Type, addressable bool) bool {
	return t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		addressable && (reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler))
}

// promotes reports whether encoding/json encodes the fields of an
// unexported embedded field of type t: a struct, or a pointer to one.
func promotes(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}

// badStrings returns an error matching ErrLossy when v, a map, slice or
// array, has a string key or element that is not valid UTF-8 and that
// walk does not visit on its own: the elements of a slice or array of
// strings, and a map's keys. entries, when not nil, gives a map's entries
// in order (see walk's sorted).
func badStrings(v reflect.Value, entries func(reflect.Value) [][2]reflect.Value) error {
	t := v.Type()
	switch {
	case v.Kind() == reflect.Map:
		keys := t.Key().Kind() == reflect.String && !marshalsItself(t.Key(), false)
		values := t.Elem().Kind() == reflect.String && !marshalsItself(t.Elem(), false)
		if !keys && !values {
			return nil
		}
		check := func(k, v reflect.Value) error {
			if keys && !utf8.ValidString(k.String()) {
				return lossy("a key of %s is not valid UTF-8", t)
			}
			if values && !utf8.ValidString(v.String()) {
				return lossy("a string in %s is not valid UTF-8", t)
			}
			return nil
		}
		if entries != nil {
			for _, e := range entries(v) {
				if err := check(e[0], e[1]); err != nil {
					return err
				}
			}
			return nil
		}
		for iter := v.MapRange(); iter.Next(); {
			if err := check(iter.Key(), iter.Value()); err != nil {
				return err
			}
		}
	case v.Kind() != reflect.Pointer && t.Elem().Kind() == reflect.String && !marshalsItself(t.Elem(), false):
		for i := range v.Len() {
			if !utf8.ValidString(v.Index(i).String()) {
				return lossy("a string in %s is not valid UTF-8", t)
			}
		}
	}
	return nil
}

func lossy(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrLossy, fmt.Sprintf(format, args...))
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
		raw, err := encodeChecked(env.Item, json.Marshal, true)
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
