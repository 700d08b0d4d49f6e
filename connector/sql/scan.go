package sql

import (
	"bytes"
	stdsql "database/sql"
	"encoding/binary"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// A scanner reads the columns of a row into an item: a struct by its
// fields' db tags, or a map[string]any.
type scanner[T any] interface {
	// columns returns the columns read when QueryOptions.Columns is empty:
	// nil for every one ("*").
	columns() []string
	// bind checks that the scanner can take the columns a query returns,
	// before its first row.
	bind(cols []string) error
	// setKinds says how to read the values of the columns bound.
	setKinds(kinds []valueKind)
	// dests sets dst[:len(cols)] to where the columns of a row go for
	// item, which the scanner then finishes with done.
	dests(item *T, dst []any)
	// done finishes item once its row was scanned.
	done(item *T)
	// keyable reports whether value can give the column's value, when
	// the column is one of the item's.
	keyable(col string) bool
	// integer reports whether the column is one of the item's and its
	// field an integer, which holds a key value as it is on every
	// database.
	integer(col string) bool
	// floatBits returns 32 or 64 when the column is one of the item's and
	// its field a float32 or float64, else 0.
	floatBits(col string) int
	// value returns the value of the i-th column bound, of a scanned
	// item, as a position holds it.
	value(item *T, i int) any
	// appendKey appends the position encoding of the i-th column bound,
	// of a scanned item, to b, when it can without boxing it; kind is how
	// the column's values read. ok is false when it cannot: use value.
	appendKey(b []byte, item *T, i int, kind valueKind) (out []byte, ok bool)
}

// newScanner returns the scanner of T, or why T cannot be scanned into.
func newScanner[T any]() (scanner[T], error) {
	t := reflect.TypeFor[T]()
	if t == reflect.TypeFor[map[string]any]() {
		return any(&mapScanner{}).(scanner[T]), nil
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("the item type %s is neither a struct nor map[string]any", t)
	}
	s := &structScanner[T]{fields: map[string][]int{}}
	for _, f := range structFields(t) {
		ft := t.FieldByIndex(f.index).Type
		if ft == rawBytes || ft == reflect.PointerTo(rawBytes) {
			return nil, fmt.Errorf("the field %s of %s (column %q) is a %s, whose bytes are the driver's, valid only until the next row, and a page is read whole before its rows are emitted: use []byte",
				t.FieldByIndex(f.index).Name, t, f.column, ft)
		}
		s.fields[f.column] = f.index
		s.order = append(s.order, f.column)
	}
	if len(s.order) == 0 {
		return nil, fmt.Errorf("the item type %s has no field to read a column into (exported, without db:\"-\")", t)
	}
	return s, nil
}

// rawBytes is database/sql's RawBytes, which a field cannot be.
var rawBytes = reflect.TypeFor[stdsql.RawBytes]()

// A structScanner reads columns into the fields of a struct, by the rules
// of structFields.
type structScanner[T any] struct {
	fields map[string][]int // field index by column name
	order  []string         // column names in field order
	bound  []boundField     // the field of each column of the query
}

func (s *structScanner[T]) columns() []string { return s.order }

func (s *structScanner[T]) bind(cols []string) error {
	s.bound = make([]boundField, len(cols))
	var missing []string
	t := reflect.TypeFor[T]()
	for i, c := range cols {
		idx, ok := s.fields[c]
		if !ok {
			missing = append(missing, fmt.Sprintf("%q", c))
			continue
		}
		s.bound[i] = newBoundField(t, idx)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s has no field for column %s (a field takes the column its db tag names)",
			reflect.TypeFor[T](), strings.Join(missing, ", "))
	}
	return nil
}

func (s *structScanner[T]) dests(item *T, dst []any) {
	base := unsafe.Pointer(item)
	for i, f := range s.bound {
		dst[i] = f.addr(unsafe.Add(base, f.offset))
	}
}

func (s *structScanner[T]) done(*T) {}

// keyable reports whether col's field has a type whose value a position
// holds as it is (an integer, a string, []byte, time.Time, a bool, a
// float).
func (s *structScanner[T]) keyable(col string) bool {
	idx, ok := s.fields[col]
	if !ok {
		return false
	}
	t := reflect.TypeFor[T]().FieldByIndex(idx).Type
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.String, reflect.Bool, reflect.Float32, reflect.Float64:
		return t.PkgPath() == "" // a named type may have a Value method
	case reflect.Slice:
		return t == reflect.TypeFor[[]byte]()
	case reflect.Struct:
		return t == reflect.TypeFor[time.Time]()
	}
	return false
}

func (s *structScanner[T]) integer(col string) bool {
	idx, ok := s.fields[col]
	if !ok {
		return false
	}
	t := reflect.TypeFor[T]().FieldByIndex(idx).Type
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return t.PkgPath() == ""
	}
	return false
}

func (s *structScanner[T]) floatBits(col string) int {
	idx, ok := s.fields[col]
	if !ok {
		return 0
	}
	switch reflect.TypeFor[T]().FieldByIndex(idx).Type.Kind() {
	case reflect.Float32:
		return 32
	case reflect.Float64:
		return 64
	}
	return 0
}

func (s *structScanner[T]) value(item *T, i int) any {
	f := s.bound[i]
	p := unsafe.Add(unsafe.Pointer(item), f.offset)
	if f.read != nil {
		return f.read(p)
	}
	v := reflect.NewAt(f.typ, p).Elem()
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint()
	case reflect.Bool:
		return v.Bool()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.Slice:
		return bytes.Clone(v.Bytes())
	}
	return v.Interface()
}

func (s *structScanner[T]) appendKey(b []byte, item *T, i int, kind valueKind) ([]byte, bool) {
	f := s.bound[i]
	p := unsafe.Add(unsafe.Pointer(item), f.offset)
	switch f.typ {
	case reflect.TypeFor[int64]():
		return binary.AppendVarint(append(b, posInt), *(*int64)(p)), true
	case reflect.TypeFor[int]():
		return binary.AppendVarint(append(b, posInt), int64(*(*int)(p))), true
	case reflect.TypeFor[string]():
		v := *(*string)(p)
		return append(binary.AppendUvarint(append(b, posString), uint64(len(v))), v...), true
	case reflect.TypeFor[[]byte]():
		v := *(*[]byte)(p)
		typ := byte(posBytes)
		switch kind {
		case kindText:
			typ = posString
		case kindUnsigned:
			return b, false // normalize reads the digits
		}
		return append(binary.AppendUvarint(append(b, typ), uint64(len(v))), v...), true
	}
	return b, false
}

// A boundField is where a column goes in a struct item: at offset from
// the item's address, a field of type typ. addr returns a pointer to it
// for rows.Scan, and read (nil for the less common types) its value as
// a position holds it: both without reflection for the common types,
// which saves a tenth of a read's time.
type boundField struct {
	offset uintptr
	typ    reflect.Type
	addr   func(unsafe.Pointer) any
	read   func(unsafe.Pointer) any
}

// newBoundField returns the field of struct t at index, which holds no
// pointer to a struct on its way: structFields descends only into embedded
// structs held by value.
func newBoundField(t reflect.Type, index []int) boundField {
	var off uintptr
	for _, x := range index {
		f := t.Field(x)
		off += f.Offset
		t = f.Type
	}
	b := boundField{offset: off, typ: t}
	switch t {
	case reflect.TypeFor[int64]():
		b.addr = func(p unsafe.Pointer) any { return (*int64)(p) }
		b.read = func(p unsafe.Pointer) any { return *(*int64)(p) }
	case reflect.TypeFor[int]():
		b.addr = func(p unsafe.Pointer) any { return (*int)(p) }
		b.read = func(p unsafe.Pointer) any { return int64(*(*int)(p)) }
	case reflect.TypeFor[int32]():
		b.addr = func(p unsafe.Pointer) any { return (*int32)(p) }
		b.read = func(p unsafe.Pointer) any { return int64(*(*int32)(p)) }
	case reflect.TypeFor[string]():
		b.addr = func(p unsafe.Pointer) any { return (*string)(p) }
		b.read = func(p unsafe.Pointer) any { return *(*string)(p) }
	case reflect.TypeFor[[]byte]():
		b.addr = func(p unsafe.Pointer) any { return (*[]byte)(p) }
		b.read = func(p unsafe.Pointer) any { return bytes.Clone(*(*[]byte)(p)) }
	case reflect.TypeFor[time.Time]():
		b.addr = func(p unsafe.Pointer) any { return (*time.Time)(p) }
		b.read = func(p unsafe.Pointer) any { return *(*time.Time)(p) }
	case reflect.TypeFor[float64]():
		b.addr = func(p unsafe.Pointer) any { return (*float64)(p) }
	case reflect.TypeFor[bool]():
		b.addr = func(p unsafe.Pointer) any { return (*bool)(p) }
	case reflect.TypeFor[*int64]():
		b.addr = func(p unsafe.Pointer) any { return (**int64)(p) }
	case reflect.TypeFor[*string]():
		b.addr = func(p unsafe.Pointer) any { return (**string)(p) }
	case reflect.TypeFor[*time.Time]():
		b.addr = func(p unsafe.Pointer) any { return (**time.Time)(p) }
	default:
		b.addr = func(p unsafe.Pointer) any { return reflect.NewAt(t, p).Interface() }
	}
	return b
}

// setKinds does nothing: database/sql converts into the fields.
func (s *structScanner[T]) setKinds([]valueKind) {}

// A mapScanner reads every column into a map[string]any by its name, as
// the driver gives it, but text that the driver gives as []byte (MySQL's)
// as a string, and an unsigned integer it gives as digits as a uint64
// (see valueKind).
type mapScanner struct {
	cols   []string
	kinds  []valueKind // how to read each column's values
	values []any
}

func (s *mapScanner) columns() []string { return nil }

func (s *mapScanner) bind(cols []string) error {
	s.cols = cols
	s.values = make([]any, len(cols))
	return nil
}

// setKinds says how to read each column's values.
func (s *mapScanner) setKinds(kinds []valueKind) { s.kinds = kinds }

// keyable is true: the map holds every column read, as the driver gave
// it.
func (s *mapScanner) keyable(string) bool { return true }

// integer is false: the map holds what the driver gives, which on SQLite
// may be a time it parsed.
func (s *mapScanner) integer(string) bool { return false }

// floatBits is 0: the map holds a value as the driver gives it.
func (s *mapScanner) floatBits(string) int { return 0 }

func (s *mapScanner) value(item *map[string]any, i int) any { return (*item)[s.cols[i]] }

func (s *mapScanner) appendKey(b []byte, _ *map[string]any, _ int, _ valueKind) ([]byte, bool) {
	return b, false
}

func (s *mapScanner) dests(_ *map[string]any, dst []any) {
	for i := range s.values {
		s.values[i] = nil
		dst[i] = &s.values[i]
	}
}

func (s *mapScanner) done(item *map[string]any) {
	m := make(map[string]any, len(s.cols))
	for i, c := range s.cols {
		v := s.values[i]
		if i < len(s.kinds) {
			v = s.kinds[i].normalize(v)
		}
		m[c] = v
	}
	*item = m
}

// A valueKind says how the source reads the values that a driver gives
// for a column, by the column's database type (database/sql's
// ColumnType.DatabaseTypeName).
type valueKind uint8

const (
	// kindOther: the value as the driver gives it. A column without a
	// type (SQLite's untyped columns and expressions) is one: the driver
	// gives its text as a string and its BLOBs as []byte.
	kindOther valueKind = iota
	// kindText: the column holds text, which a driver that gives []byte
	// (go-sql-driver/mysql) gives as a string.
	kindText
	// kindUnsigned: an unsigned integer column. go-sql-driver/mysql gives
	// a BIGINT UNSIGNED as a uint64 in a statement without arguments (the
	// text protocol), and in one with arguments (the binary protocol) as
	// an int64, or above math.MaxInt64 as decimal digits in []byte: a
	// uint64 in every case.
	kindUnsigned
)

// kindOf returns the kind of a column of the database type named.
func kindOf(typeName string) valueKind {
	t := strings.ToUpper(typeName)
	switch {
	case t == "":
		return kindOther
	case strings.Contains(t, "UNSIGNED"):
		return kindUnsigned
	case strings.Contains(t, "BLOB"), strings.Contains(t, "BINARY"), t == "BYTEA", t == "BIT", t == "GEOMETRY":
		return kindOther
	case strings.Contains(t, "CHAR"), strings.Contains(t, "TEXT"), t == "ENUM", t == "SET", t == "JSON",
		t == "DECIMAL", t == "NUMERIC", t == "UUID":
		return kindText
	}
	return kindOther
}

// normalize returns v, a value the driver gave for a column of kind k,
// as the source hands it on and keeps it in a position.
func (k valueKind) normalize(v any) any {
	if i, ok := v.(int64); ok && k == kindUnsigned && i >= 0 {
		return uint64(i)
	}
	b, ok := v.([]byte)
	if !ok {
		return v
	}
	switch k {
	case kindText:
		return string(b)
	case kindUnsigned:
		if u, err := strconv.ParseUint(string(b), 10, 64); err == nil {
			return u
		}
	}
	return v
}
