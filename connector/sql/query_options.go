package sql

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
)

// DefaultPageSize is the number of rows a [Query] reads per page when
// QueryOptions.PageSize is 0.
const DefaultPageSize = 1000

// QueryOptions say what a [Query] reads and how. The zero value is not
// valid: Key and one of Table and From are required.
type QueryOptions struct {
	// Table is the table read, quoted by the dialect (schema.table is
	// quoted part by part). Give Table or From, not both.
	Table string
	// From is a SELECT statement read as a subquery, for a join or a
	// computed column: the source selects from (From) with its own WHERE,
	// ORDER BY and LIMIT, so Key, Watermark and Columns name columns of
	// its result. Give Table or From, not both.
	From string
	// Key names the columns of a unique key, in order: the source reads
	// rows in this order, and a row's position is its key. The columns
	// must be NOT NULL: rows with NULL in one fail the run at Open (and,
	// with Follow, at the poll that finds one), with a [*KeyError] (see
	// [Source.Open]), as do two rows of a page with the same key.
	Key []string
	// Columns names the columns read. When empty, a struct item reads the
	// columns of its fields (see [Query]); a map[string]any item reads
	// every column (SELECT *).
	Columns []string
	// Where is an extra condition in the dialect's SQL, such as
	// "status = ?" (PostgreSQL: "status = $1"), ANDed with the key's;
	// its arguments are Args. It is read as written: never put input in
	// it, put it in Args.
	Where string
	// Args are the arguments of Where's placeholders.
	Args []any
	// PageSize is the number of rows a page reads; 0 means
	// [DefaultPageSize]. A page is read whole before its rows are
	// emitted, so the source holds no connection while the pipeline
	// applies backpressure, and it holds one page of items in memory.
	PageSize int
	// Follow, when positive, makes the source follow the table: after the
	// last row, it reads again every Follow for rows past the last one,
	// until the run drains or its context ends. 0 reads the rows there
	// are and ends.
	Follow time.Duration
	// Watermark names a column, such as updated_at, that orders the rows
	// before Key: a row's position is then its watermark and its key, so
	// that a row updated with a newer watermark is read again (see the
	// package documentation for what this misses). The column must be
	// NOT NULL, as Key's.
	Watermark string
	// Clock is what Follow's waits use. nil means the pipeline's clock
	// (pipeline.WithClock, which the source takes as a
	// pipeline.ClockSetter), or the real clock outside a pipeline; a
	// clock given here wins over the pipeline's.
	Clock clockwork.Clock
}

// ErrQueryOptions matches every [*QueryOptionError] with errors.Is.
var ErrQueryOptions = errors.New("sql: invalid query options")

// A QueryOptionError is a problem of one field of [QueryOptions].
type QueryOptionError struct {
	// Field is the field's name, such as "Key".
	Field string
	// Problem says what is wrong with it.
	Problem string
}

// Error returns "sql: QueryOptions.Field: problem".
func (e *QueryOptionError) Error() string {
	return fmt.Sprintf("sql: QueryOptions.%s: %s", e.Field, e.Problem)
}

// Is reports whether target is [ErrQueryOptions].
func (e *QueryOptionError) Is(target error) bool { return target == ErrQueryOptions }

// Validate returns every problem of o joined, each a [*QueryOptionError],
// or nil. [Query]'s source calls it at Open.
func (o QueryOptions) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &QueryOptionError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	switch {
	case o.Table == "" && o.From == "":
		bad("Table", "empty, and so is From: name the table read, or give a SELECT as From")
	case o.Table != "" && o.From != "":
		bad("From", "given with Table %q: give one of them", o.Table)
	}
	if len(o.Key) == 0 {
		bad("Key", "empty: name the columns of a unique key, which order the rows and make their positions")
	}
	for i, k := range o.Key {
		switch {
		case k == "":
			bad("Key", "column %d is an empty name", i+1)
		case slices.Index(o.Key, k) < i:
			bad("Key", "column %q is named twice", k)
		case k == o.Watermark:
			bad("Watermark", "%q is a key column too: the watermark orders rows before the key", k)
		}
	}
	for i, c := range o.Columns {
		if c == "" {
			bad("Columns", "column %d is an empty name", i+1)
		}
	}
	if len(o.Args) > 0 && o.Where == "" {
		bad("Args", "%d arguments without a Where to take them", len(o.Args))
	}
	if o.PageSize < 0 {
		bad("PageSize", "%d is negative (0 means %d)", o.PageSize, DefaultPageSize)
	}
	if o.Follow < 0 {
		bad("Follow", "%v is negative (0 reads once)", o.Follow)
	}
	return errors.Join(errs...)
}

// order returns the columns the rows are ordered by, which make their
// positions: the watermark, if any, then the key.
func (o QueryOptions) order() []string {
	if o.Watermark == "" {
		return o.Key
	}
	return append([]string{o.Watermark}, o.Key...)
}
