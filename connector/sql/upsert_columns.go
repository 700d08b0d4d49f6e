package sql

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// upsertColumns are the columns an [Upsert] writes, read from the fields
// of a struct type by the rules a [Query] reads them by: a field takes
// the column its db tag names, or, without a tag, the column named as the
// field in lower case; db:"-" and unexported fields take none; the fields
// of an embedded struct without a tag are the item's own. The tag option
// "key" (db:"id,key") puts the column in the conflict key.
type upsertColumns struct {
	names []string // in field order
	index [][]int  // field index of each column
	keys  []string // the columns tagged key, in field order
}

// columnsOf returns the columns of struct type t.
func columnsOf(t reflect.Type) (*upsertColumns, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct: Upsert writes the fields of a struct", t)
	}
	c := &upsertColumns{}
	seen := map[string]bool{}
	c.collect(t, nil, seen)
	if len(c.names) == 0 {
		return nil, fmt.Errorf("%s has no exported field to write", t)
	}
	return c, nil
}

func (c *upsertColumns) collect(t reflect.Type, prefix []int, seen map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("db")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		index := append(slices.Clone(prefix), i)
		if f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct {
			c.collect(f.Type, index, seen)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if seen[name] {
			continue // the shallower field wins, as Go's own selectors
		}
		seen[name] = true
		c.names = append(c.names, name)
		c.index = append(c.index, index)
		if slices.Contains(strings.Split(opts, ","), "key") {
			c.keys = append(c.keys, name)
		}
	}
}

// appendArgs appends the values of item's columns to args, in column
// order.
func (c *upsertColumns) appendArgs(args []any, item reflect.Value) []any {
	for _, idx := range c.index {
		var f reflect.Value
		if len(idx) == 1 {
			f = item.Field(idx[0])
		} else {
			f = item.FieldByIndex(idx)
		}
		args = append(args, f.Interface())
	}
	return args
}
