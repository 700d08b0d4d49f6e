package sql

import (
	stdsql "database/sql"
	"errors"
	"fmt"
	"strings"
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

// ErrKey matches every [*KeyError] with errors.Is.
var ErrKey = errors.New("sql: the key does not order the rows")

// A KeyError says that the key (with the watermark) of a [Source] does not
// order the rows as it must, one by one: two rows of a page have the same
// key (the key is not unique), a page starts with the row it was to start
// after (the database compares the key's values otherwise than the driver
// gives them), rows have NULL in a key or watermark column, or such a
// column is of a type the pages cannot order by (on MySQL an ENUM or SET;
// a column read into a float field narrower than it). It fails
// the run: reading on would lose rows without a word, or read one for
// ever.
type KeyError struct {
	// Source is the table read, or "query" for QueryOptions.From.
	Source string
	// Columns are the columns that order the rows: the watermark, if
	// any, then the key.
	Columns []string
	// Row shows the key of the row, such as "(id=7)"; empty when the
	// problem is of several rows (NULL in a column).
	Row string
	// Problem says what is wrong.
	Problem string
}

// Error returns "sql: source: key (columns): row (key): problem".
func (e *KeyError) Error() string {
	row := ""
	if e.Row != "" {
		row = "row " + e.Row + ": "
	}
	return fmt.Sprintf("sql: %s: key (%s): %s%s", e.Source, strings.Join(e.Columns, ", "), row, e.Problem)
}

// Is reports whether target is [ErrKey].
func (e *KeyError) Is(target error) bool { return target == ErrKey }
