package sql

import (
	stdsql "database/sql"
	"errors"
	"fmt"
)

// ErrPosition is the error of a position that does not fit the query:
// bytes that no [Source] gave, or the position of a query ordered by
// another number of columns. The error Resume returns wraps it and names
// the table.
var ErrPosition = errors.New("sql: position does not fit the query")

// ErrScan matches every [*ScanError] with errors.Is.
var ErrScan = errors.New("sql: row does not scan")

// A ScanError is a row that a [Source] could not read into an item: a
// NULL in a column whose field cannot hold one, a value the field's type
// cannot take, or a key or watermark column that is NULL or of a type a
// position cannot hold. It fails the run: the row is not skipped.
type ScanError struct {
	// Source is the table read, or "query" for QueryOptions.From.
	Source string
	// Row shows the key of the row, such as "(id=7)", or, when the key
	// did not read, that of the row before it.
	Row string
	// Column is the column that did not scan.
	Column string
	// Err is the error of database/sql, or of the position.
	Err error
}

// Error returns "sql: source: row (key): column "c": err".
func (e *ScanError) Error() string {
	return fmt.Sprintf("sql: %s: row %s: column %q: %v", e.Source, e.Row, e.Column, e.Err)
}

// Unwrap returns e.Err.
func (e *ScanError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrScan].
func (e *ScanError) Is(target error) bool { return target == ErrScan }

// scanError finds which column of the current row failed to scan into
// dst with err, by scanning each alone, and returns the error naming it
// and the row: keySrc says which columns hold the key. prev is the key of
// the row before.
func (s *Source[T]) scanError(rows *stdsql.Rows, cols []string, keySrc []int, dst []any, prev position, err error) error {
	holders := make([]any, len(dst))
	sink := make([]any, len(dst))
	for i := range sink {
		sink[i] = &holders[i]
	}
	row := "after " + s.keyText(prev)
	if rows.Scan(sink...) == nil {
		key := make(position, len(keySrc))
		for i, c := range keySrc {
			key[i] = holders[c]
			if b, ok := key[i].([]byte); ok {
				key[i] = string(b)
			}
		}
		row = s.keyText(key)
	}
	e := &ScanError{Source: s.name(), Row: row, Err: err}
	for i := range dst {
		try := append([]any(nil), sink...)
		try[i] = dst[i]
		if err := rows.Scan(try...); err != nil {
			e.Column, e.Err = cols[i], err
			break
		}
	}
	return e
}
