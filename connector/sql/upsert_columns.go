package sql

import (
	"fmt"
	"reflect"
)

// upsertColumns are the columns an [Upsert] writes, read from the fields
// of a struct type by the rules a [Query] reads them by (structFields).
// The tag option "key" (db:"id,key") puts the column in the conflict key.
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
	for _, f := range structFields(t) {
		c.names = append(c.names, f.column)
		c.index = append(c.index, f.index)
		if f.key {
			c.keys = append(c.keys, f.column)
		}
	}
	if len(c.names) == 0 {
		return nil, fmt.Errorf("%s has no exported field to write", t)
	}
	return c, nil
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
