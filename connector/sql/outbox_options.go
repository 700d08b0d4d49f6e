package sql

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jonboulle/clockwork"
)

// ErrOutbox is the sentinel of the errors of an outbox source ([Outbox]):
// a read of the table or a delete (or mark) of its rows that failed, or
// a row that does not scan into the item. errors.As finds the
// [*OutboxError] with the table and the step.
var ErrOutbox = errors.New("sql: outbox")

// ErrOutboxOptions matches every [*OutboxOptionError] with errors.Is.
var ErrOutboxOptions = errors.New("sql: invalid outbox options")

// An OutboxOptionError is a problem of one field of [OutboxOptions], or
// of the table it names, found at Open.
type OutboxOptionError struct {
	// Field is the field's name, such as "Key".
	Field string
	// Problem says what is wrong with it.
	Problem string
}

// Error returns "sql: OutboxOptions.Field: problem".
func (e *OutboxOptionError) Error() string {
	return fmt.Sprintf("sql: OutboxOptions.%s: %s", e.Field, e.Problem)
}

// Is reports whether target is [ErrOutboxOptions].
func (e *OutboxOptionError) Is(target error) bool { return target == ErrOutboxOptions }

// An OutboxError is a step of an outbox source that failed: Op is "read",
// "delete", "mark" or "scan" (a row that does not scan into the item,
// which the source dead-letters). It matches [ErrOutbox] with errors.Is
// and unwraps to the database's error.
type OutboxError struct {
	// Table is the outbox table.
	Table string
	// Op is the step that failed: "read", "delete", "mark" or "scan".
	Op string
	// After is, for a read, the key after which the page started
	// (math.MinInt64 for the start of the table); 0 for the other steps.
	After int64
	// Key is, for "scan", the key of the row that does not scan; 0 for
	// the other steps.
	Key int64
	// Column is, for "scan", the column that does not scan into its
	// field; empty for the other steps.
	Column string
	// Err is the database's error.
	Err error
}

// Error says which step failed on which table, and why.
func (e *OutboxError) Error() string {
	switch {
	case e.Op == "scan":
		return fmt.Sprintf("sql: outbox %s: row with key %d: column %q: %v", e.Table, e.Key, e.Column, e.Err)
	case e.Op == "read" && e.After != math.MinInt64:
		return fmt.Sprintf("sql: outbox %s: read after key %d: %v", e.Table, e.After, e.Err)
	}
	return fmt.Sprintf("sql: outbox %s: %s: %v", e.Table, e.Op, e.Err)
}

// Is reports whether target is [ErrOutbox].
func (e *OutboxError) Is(target error) bool { return target == ErrOutbox }

// Unwrap returns the database's error.
func (e *OutboxError) Unwrap() error { return e.Err }

// Defaults of [OutboxOptions].
const (
	// DefaultOutboxPageSize is OutboxOptions.PageSize's default.
	DefaultOutboxPageSize = 100
	// DefaultOutboxMaxInFlight is OutboxOptions.MaxInFlight's default.
	DefaultOutboxMaxInFlight = 1000
	// DefaultOutboxDeleteBatch is OutboxOptions.DeleteBatch's default.
	DefaultOutboxDeleteBatch = 100
	// DefaultOutboxPoll is OutboxOptions.PollInterval's default.
	DefaultOutboxPoll = time.Second
)

// OutboxOptions configure an outbox source ([Outbox]). Only Table is
// required; a zero field takes its default.
type OutboxOptions struct {
	// Table is the outbox table, as schema.table or table.
	Table string
	// Key is the column of the table's increasing integer key (a
	// BIGSERIAL, an AUTO_INCREMENT, an INTEGER PRIMARY KEY
	// AUTOINCREMENT); rows are read in its order. The default is "id".
	//
	// A key must never be taken again by a later row: a delete whose
	// answer was lost is tried again by key, and would delete a new row
	// that took the key before it was emitted. PostgreSQL's sequences and
	// MySQL's AUTO_INCREMENT never give a key twice (unless reset by
	// hand); SQLite's INTEGER PRIMARY KEY without AUTOINCREMENT gives
	// the highest deleted key again, so Open refuses such a table.
	Key string
	// MarkColumn, when set, makes the outbox mark a settled row instead
	// of deleting it: it sets this nullable timestamp column to
	// CURRENT_TIMESTAMP, and reads only the rows where it is NULL.
	MarkColumn string
	// PageSize is the number of rows one read asks for; the default is
	// [DefaultOutboxPageSize].
	PageSize int
	// PollInterval is how long the outbox waits, on Clock, after a read
	// found the table drained, before it reads again, and how long it
	// waits before it emits again a row whose item ended Failed while
	// the run went on; it also bounds the waits between the tries of a
	// failed read or delete. The default is [DefaultOutboxPoll].
	PollInterval time.Duration
	// MaxInFlight bounds the rows emitted and not yet deleted (or
	// marked): at the bound, the outbox waits for rows to settle before
	// it emits more. It must be at least the size of the largest batch
	// downstream (pipeline.Batch, MapBatch): a batch that waits to fill
	// with rows the outbox holds back never fills, and the pipeline
	// stalls. The default is [DefaultOutboxMaxInFlight].
	MaxInFlight int
	// DeleteBatch is the most keys one DELETE (or UPDATE) names, at most
	// the dialect's limit of placeholders (32766 for SQLite, 65535 for
	// PostgreSQL and MySQL); the default is [DefaultOutboxDeleteBatch].
	DeleteBatch int
	// Clock is what the outbox waits on: give the pipeline's
	// (pipeline.WithClock), so that a test's fake clock drives both. The
	// default is the real clock.
	Clock clockwork.Clock
}

// withDefaults returns o with its zero fields set to their defaults.
func (o OutboxOptions) withDefaults() OutboxOptions {
	if o.Key == "" {
		o.Key = "id"
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultOutboxPageSize
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultOutboxPoll
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultOutboxMaxInFlight
	}
	if o.DeleteBatch == 0 {
		o.DeleteBatch = DefaultOutboxDeleteBatch
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	return o
}

// Validate returns every problem of o joined, each an
// [*OutboxOptionError], or nil. The outbox source calls it at Open, and
// checks there too what depends on the dialect and the table.
func (o OutboxOptions) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &OutboxOptionError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if o.Table == "" {
		bad("Table", "empty: name the outbox table")
	}
	if o.MarkColumn != "" && o.MarkColumn == o.Key {
		bad("MarkColumn", "%q is the key column", o.MarkColumn)
	}
	if o.PageSize < 0 {
		bad("PageSize", "%d is negative (0 means %d)", o.PageSize, DefaultOutboxPageSize)
	}
	if o.PollInterval < 0 {
		bad("PollInterval", "%v is negative (0 means %v)", o.PollInterval, DefaultOutboxPoll)
	}
	if o.MaxInFlight < 0 {
		bad("MaxInFlight", "%d is negative (0 means %d)", o.MaxInFlight, DefaultOutboxMaxInFlight)
	}
	if o.DeleteBatch < 0 {
		bad("DeleteBatch", "%d is negative (0 means %d)", o.DeleteBatch, DefaultOutboxDeleteBatch)
	}
	return errors.Join(errs...)
}
