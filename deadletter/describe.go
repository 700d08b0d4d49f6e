package deadletter

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of [Describe].
const (
	describeDepth = 8    // levels of nesting shown
	describeBytes = 4096 // length of the text, in bytes
	describeElems = 64   // elements of one slice, array or map shown
)

// Describe renders item for a person, much as fmt's %+v does, for an item
// that could not be encoded (see [Envelope.ItemText]). Unlike fmt it is
// bounded, so that no item can crash the process on its way to a
// dead-letter sink: it shows at most 8 levels of nesting (a pointer to a
// struct is one level with it), 64 elements of a slice, array or map, and
// 4096 bytes in all, marks what it leaves out with "...", and prints a
// pointer, map or slice it meets again inside itself as <cycle>. A byte
// of a string that is not valid UTF-8 is shown as \xNN, so that the text
// keeps it through JSON. A channel, func or unsafe pointer shows its
// type, not its address, so that an item decoded again reads as before.
// Map
// entries are sorted by key: as fmt sorts them for strings, numbers and
// booleans, by the key's rendering otherwise. It calls no method of the
// item (no String, Error or MarshalJSON), so user code can neither recurse
// nor panic in it.
func Describe(item any) string {
	d := describer{seen: map[seenKey]bool{}}
	d.value(reflect.ValueOf(item), 0)
	return d.String()
}

type seenKey struct {
	ptr uintptr
	typ reflect.Type
}

type describer struct {
	strings.Builder
	seen map[seenKey]bool // the pointers, maps and slices being shown
	full bool             // the text reached describeBytes
	// sortKey makes the text that orders a map's entries (see
	// mapEntries): a map inside is shown by its type and length, not its
	// entries, so that ordering one map never orders another (which,
	// through a map that holds itself, never ended).
	sortKey bool
}

// write adds s unless the text is full; past the limit it cuts s at a rune
// boundary and adds "...", within the limit.
func (d *describer) write(s string) {
	if d.full {
		return
	}
	if room := describeBytes - len("...") - d.Len(); len(s) > room {
		cut := room
		for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut--
		}
		d.WriteString(s[:cut])
		d.WriteString("...")
		d.full = true
		return
	}
	d.WriteString(s)
}

func (d *describer) value(v reflect.Value, depth int) {
	if d.full {
		return
	}
	if !v.IsValid() {
		d.write("<nil>")
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		d.write(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.write(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		d.write(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		d.write(strconv.FormatFloat(v.Float(), 'g', -1, v.Type().Bits()))
	case reflect.Complex64, reflect.Complex128:
		d.write(strconv.FormatComplex(v.Complex(), 'g', -1, v.Type().Bits()))
	case reflect.String:
		d.write(escapeInvalid(v.String()))
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		if v.IsNil() {
			d.write("<nil>")
			return
		}
		// No address: one item decoded again (a replay, a resumed run)
		// has others, and its text is part of the letter's key, which
		// must not change (see dedup.go).
		d.write("(" + v.Type().String() + ")")
	case reflect.Interface:
		d.value(v.Elem(), depth)
	case reflect.Pointer:
		if v.IsNil() {
			d.write("<nil>")
			return
		}
		d.nested(v, depth, func() {
			d.write("&")
			// A pointer to a struct is one level with it.
			if v.Elem().Kind() == reflect.Struct {
				d.value(v.Elem(), depth)
				return
			}
			d.value(v.Elem(), depth+1)
		})
	case reflect.Struct:
		if depth >= describeDepth {
			d.write("{...}")
			return
		}
		d.write("{")
		t := v.Type()
		for i := range v.NumField() {
			if i > 0 {
				d.write(" ")
			}
			d.write(t.Field(i).Name)
			d.write(":")
			d.value(v.Field(i), depth+1)
		}
		d.write("}")
	case reflect.Map:
		if v.IsNil() {
			d.write("map[]")
			return
		}
		if d.sortKey {
			d.write(v.Type().String() + "(len " + strconv.Itoa(v.Len()) + ")")
			return
		}
		d.nested(v, depth, func() {
			d.write("map[")
			for n, e := range mapEntries(v) {
				if n == describeElems {
					d.write(" ...")
					break
				}
				if n > 0 {
					d.write(" ")
				}
				d.value(e[0], depth+1)
				d.write(":")
				d.value(e[1], depth+1)
			}
			d.write("]")
		})
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			d.write("[]")
			return
		}
		show := func() {
			d.write("[")
			for i := range v.Len() {
				if i == describeElems {
					d.write(" ...")
					break
				}
				if i > 0 {
					d.write(" ")
				}
				d.value(v.Index(i), depth+1)
			}
			d.write("]")
		}
		if v.Kind() == reflect.Array || v.Len() == 0 {
			if depth >= describeDepth {
				d.write("[...]")
				return
			}
			show()
			return
		}
		d.nested(v, depth, show)
	default:
		d.write("<" + v.Type().String() + ">")
	}
}

// nested shows a pointer, map or slice v with show, unless it is deeper
// than describeDepth or already being shown further out (a cycle).
func (d *describer) nested(v reflect.Value, depth int, show func()) {
	if depth >= describeDepth {
		d.write("...")
		return
	}
	// A slice is the same only with the same start and type; slices of
	// one array at other offsets are other values.
	key := seenKey{ptr: v.Pointer(), typ: v.Type()}
	if d.seen[key] {
		d.write("<cycle>")
		return
	}
	d.seen[key] = true
	show()
	delete(d.seen, key)
}

// mapEntries returns the entries of map v, read with MapRange (so that a
// NaN key keeps its value), sorted by key as fmt sorts them for strings,
// numbers and booleans, and by the key's rendering otherwise, so that the
// same map is described the same way each time. Keys alike (NaNs; 1, "1"
// and int64(1) in a map[any]; channels; renderings cut at the limit) are
// ordered by their values' rendering, then by the types of key and value.
// Those renderings show a map inside by its type and length only, so
// entries alike but for the contents of such a map keep the order Go
// gave them.
func mapEntries(v reflect.Value) [][2]reflect.Value {
	var es [][2]reflect.Value
	for iter := v.MapRange(); iter.Next(); {
		es = append(es, [2]reflect.Value{iter.Key(), iter.Value()})
	}
	var by func(a, b reflect.Value) int
	switch v.Type().Key().Kind() {
	case reflect.String:
		by = func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		by = func(a, b reflect.Value) int { return cmp.Compare(a.Int(), b.Int()) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		by = func(a, b reflect.Value) int { return cmp.Compare(a.Uint(), b.Uint()) }
	case reflect.Float32, reflect.Float64:
		by = func(a, b reflect.Value) int { return cmp.Compare(a.Float(), b.Float()) }
	case reflect.Bool:
		by = func(a, b reflect.Value) int { return cmp.Compare(boolInt(a.Bool()), boolInt(b.Bool())) }
	}
	// Renderings are made once each, and a value's only for a tie.
	keyText, valText := map[int]string{}, map[int]string{}
	text := func(memo map[int]string, i int, x reflect.Value) string {
		if t, ok := memo[i]; ok {
			return t
		}
		// Not Describe(x.Interface()): a value reached through an
		// unexported embedded struct cannot be taken out as an interface.
		d := describer{seen: map[seenKey]bool{}, sortKey: true}
		d.value(x, 0)
		memo[i] = d.String()
		return memo[i]
	}
	idx := make([]int, len(es))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ka, kb := es[a][0], es[b][0]
		var c int
		if by != nil {
			c = by(ka, kb)
		} else {
			c = strings.Compare(text(keyText, a, ka), text(keyText, b, kb))
		}
		if c != 0 {
			return c
		}
		va, vb := es[a][1], es[b][1]
		if c = strings.Compare(text(valText, a, va), text(valText, b, vb)); c != 0 {
			return c
		}
		if c = strings.Compare(dynamicType(ka), dynamicType(kb)); c != 0 {
			return c
		}
		return strings.Compare(dynamicType(va), dynamicType(vb))
	})
	sorted := make([][2]reflect.Value, len(es))
	for i, j := range idx {
		sorted[i] = es[j]
	}
	return sorted
}

// dynamicType names the type of x, of what it holds when it is an
// interface.
func dynamicType(x reflect.Value) string {
	if x.Kind() == reflect.Interface && !x.IsNil() {
		x = x.Elem()
	}
	return x.Type().String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// escapeInvalid returns s with each byte that is not part of valid UTF-8
// written as \xNN; a valid s is returned as it is.
func escapeInvalid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, "\\x%02x", s[i])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
