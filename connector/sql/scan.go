package sql

import (
	"fmt"
	"reflect"
	"strings"
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
	// setText says which of the columns bound hold text.
	setText(text []bool)
	// dests sets dst[:len(cols)] to where the columns of a row go for
	// item, which the scanner then finishes with done.
	dests(item *T, dst []any)
	// done finishes item once its row was scanned.
	done(item *T)
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
	s.collect(t, nil)
	if len(s.order) == 0 {
		return nil, fmt.Errorf("the item type %s has no field to read a column into (exported, without db:\"-\")", t)
	}
	return s, nil
}

// A structScanner reads columns into the fields of a struct: a field
// takes the column its db tag names, or, without a tag, the column named
// as the field in lower case; db:"-" and unexported fields take none.
type structScanner[T any] struct {
	fields map[string][]int // field index by column name
	order  []string         // column names in field order
	bound  [][]int          // field index of each column of the query
}

// collect adds the fields of struct t, whose index within the item is
// prefix: those of an embedded struct without a tag are the item's own.
func (s *structScanner[T]) collect(t reflect.Type, prefix []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("db")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		index := append(append([]int{}, prefix...), i)
		if f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct {
			s.collect(f.Type, index)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if _, dup := s.fields[name]; dup {
			continue // the shallower field wins, as Go's own selectors
		}
		s.fields[name] = index
		s.order = append(s.order, name)
	}
}

func (s *structScanner[T]) columns() []string { return s.order }

func (s *structScanner[T]) bind(cols []string) error {
	s.bound = make([][]int, len(cols))
	var missing []string
	for i, c := range cols {
		idx, ok := s.fields[c]
		if !ok {
			missing = append(missing, fmt.Sprintf("%q", c))
			continue
		}
		s.bound[i] = idx
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s has no field for column %s (a field takes the column its db tag names)",
			reflect.TypeFor[T](), strings.Join(missing, ", "))
	}
	return nil
}

func (s *structScanner[T]) dests(item *T, dst []any) {
	v := reflect.ValueOf(item).Elem()
	for i, idx := range s.bound {
		if len(idx) == 1 {
			dst[i] = v.Field(idx[0]).Addr().Interface()
		} else {
			dst[i] = v.FieldByIndex(idx).Addr().Interface()
		}
	}
}

func (s *structScanner[T]) done(*T) {}

// setText does nothing: database/sql converts into the fields.
func (s *structScanner[T]) setText([]bool) {}

// A mapScanner reads every column into a map[string]any by its name, as
// the driver gives it, but text that the driver gives as []byte (MySQL's)
// as a string.
type mapScanner struct {
	cols   []string
	text   []bool // the column holds text
	values []any
}

func (s *mapScanner) columns() []string { return nil }

func (s *mapScanner) bind(cols []string) error {
	s.cols = cols
	s.values = make([]any, len(cols))
	return nil
}

// setText says which of the columns hold text.
func (s *mapScanner) setText(text []bool) { s.text = text }

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
		if b, ok := v.([]byte); ok && i < len(s.text) && s.text[i] {
			v = string(b)
		}
		m[c] = v
	}
	*item = m
}

// isText reports whether a column of the database type named (as
// database/sql's ColumnType.DatabaseTypeName gives it) holds text, not
// bytes: a value the driver gives as []byte is then a string.
func isText(typeName string) bool {
	t := strings.ToUpper(typeName)
	switch {
	case strings.Contains(t, "BLOB"), strings.Contains(t, "BINARY"), t == "BYTEA", t == "BIT", t == "GEOMETRY":
		return false
	case strings.Contains(t, "CHAR"), strings.Contains(t, "TEXT"), t == "ENUM", t == "SET", t == "JSON",
		t == "DECIMAL", t == "NUMERIC", t == "UUID", t == "":
		return true
	}
	return false
}
