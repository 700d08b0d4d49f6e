package sql

import (
	"reflect"
	"slices"
	"strings"
)

// A structField is a field of an item's struct type that takes a column.
type structField struct {
	column string // the column's name
	index  []int  // the field's index, for reflect's FieldByIndex
	key    bool   // tagged with the option key: db:"id,key"
}

// structFields returns the fields of struct type t that take a column,
// in field order, by the rules every part of the package reads a struct
// by: a field takes the column its db tag names, or, without a tag, the
// column named as the field in lower case; db:"-" and unexported fields
// take none; the fields of an embedded struct held by value and without a
// tag are the item's own, and an embedded pointer without a tag takes no
// column (a new item holds it nil). When two fields name one column, the
// shallower one takes it, as Go's selectors choose; of two at one depth,
// the first.
func structFields(t reflect.Type) []structField {
	var all []structField
	collectFields(t, nil, &all)
	depth := map[string]int{} // the shallowest depth of each column
	for _, f := range all {
		if d, ok := depth[f.column]; !ok || len(f.index) < d {
			depth[f.column] = len(f.index)
		}
	}
	var out []structField
	for _, f := range all {
		if d, ok := depth[f.column]; ok && d == len(f.index) {
			out = append(out, f)
			delete(depth, f.column) // the first at that depth
		}
	}
	return out
}

func collectFields(t reflect.Type, prefix []int, all *[]structField) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("db")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		index := append(slices.Clone(prefix), i)
		if f.Anonymous && !hasTag {
			if f.Type.Kind() == reflect.Struct {
				collectFields(f.Type, index, all)
			}
			continue // an embedded pointer would have to be allocated
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		*all = append(*all, structField{column: name, index: index,
			key: slices.Contains(strings.Split(opts, ","), "key")})
	}
}
