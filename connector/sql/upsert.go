package sql

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// DefaultBatchSize is the rows an [Upsert] writes in one transaction when
// [UpsertOptions].BatchSize is 0.
const DefaultBatchSize = 500

// UpsertOptions say where and how an [Upsert] writes.
type UpsertOptions struct {
	// Table is the table written, quoted as the dialect quotes names; a
	// name with a dot is schema.table. Required.
	Table string
	// Key names the columns of the conflict key: a row whose key is in
	// the table already updates the other columns. Empty: the columns
	// whose fields are tagged with the option key, db:"id,key". PostgreSQL
	// and SQLite need a unique index or primary key on exactly these
	// columns; MySQL matches on any unique index of the table and leaves
	// these columns out of the update.
	Key []string
	// BatchSize is the most rows written in one transaction; 0 means
	// [DefaultBatchSize].
	BatchSize int
	// Linger is how long a part batch waits for more rows, on the
	// pipeline's clock, from its first row. 0 waits for a full batch or
	// the end of the input: set it when the input does not end, as from a
	// source that follows a table.
	Linger time.Duration
	// MaxParams is the most placeholders in one statement; a batch is
	// written in as many statements as it needs, in its one transaction.
	// 0 means the dialect's limit: 32766 for SQLite (set 999 for a
	// SQLite older than 3.32), 65535 for PostgreSQL and MySQL.
	MaxParams int
	// SkipUnchanged updates a row whose key is in the table only when
	// one of its other columns differs (PostgreSQL: IS DISTINCT FROM,
	// SQLite: IS NOT, so that NULL equals NULL); a row that is already
	// there as written is left alone, and [Upserter.RowsAffected] counts
	// only the rows inserted or changed. MySQL leaves such a row alone
	// whatever this says. On PostgreSQL every column written needs an
	// equality operator (json, xml and point have none).
	SkipUnchanged bool
}

// ErrUpsertOptions is matched by the error of [NewUpserter] for options
// that cannot work, and by the error of Build of a pipeline that [Upsert]
// added such options to.
var ErrUpsertOptions = errors.New("sql: invalid upsert options")

// ErrCommitUnknown is matched by the error of rows whose transaction's
// COMMIT failed without an answer from the database (the connection was
// lost, or ctx ended while it waited), or whose one statement, written
// without a transaction and so its own COMMIT, did: the database may have
// written them or not. An upsert written twice leaves the same row, so such an
// error is transient and the rows are written again. A COMMIT that the
// database answered with an error (a deferred constraint, a
// serialization failure) rolled back: its rows get that error, as if a
// statement had failed.
var ErrCommitUnknown = errors.New("sql: commit outcome unknown")

// ErrStatement is matched by the error of rows whose batch the database
// refused for a reason that no row causes: a table or column that does
// not exist, a syntax error, a permission, a read-only database. Every
// row of the batch gets the same [*RowError], permanent, without
// splitting the batch; the rows can be written again (a dead letter
// re-driven) once the cause is fixed.
var ErrStatement = errors.New("sql: statement refused")

// ErrWrite is matched by every [*RowError].
var ErrWrite = errors.New("sql: row not written")

// A RowError is the error of one row that an [Upsert] did not write:
// what the database said, with the constraint, column and code it named.
// It matches [ErrWrite]. A transient one (see [Classifier]) is wrapped by
// [resilience.MarkTransient].
type RowError struct {
	// Table is the table written, as UpsertOptions named it.
	Table string
	// Constraint is the constraint the row violated, when the database
	// named one (PostgreSQL and MySQL name every constraint; SQLite
	// names CHECK constraints only).
	Constraint string
	// Column is the column the database named, such as a NOT NULL
	// column, when it named one (for SQLite's UNIQUE, the columns).
	Column string
	// Code is the database's code for the error: PostgreSQL's SQLSTATE
	// ("23514"), MySQL's error number ("1062"), SQLite's extended result
	// code by its name ("SQLITE_CONSTRAINT_CHECK"); empty when the error
	// came from elsewhere, such as the connection.
	Code string
	// Err is the driver's error (with [ErrCommitUnknown] when the COMMIT
	// failed without an answer, with [ErrStatement] when no row caused
	// it).
	Err error

	// transient is Upsert's verdict: the error is transient. Classifier
	// honours it before its own rules.
	transient bool
}

// Error names the table, the constraint, the column and the code, when
// known, then gives the driver's message.
func (e *RowError) Error() string {
	var b strings.Builder
	b.WriteString("sql: upsert into ")
	b.WriteString(e.Table)
	if e.Constraint != "" {
		fmt.Fprintf(&b, ": constraint %q", e.Constraint)
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ": column %q", e.Column)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the driver's error.
func (e *RowError) Unwrap() error { return e.Err }

// Is reports whether target is ErrWrite.
func (e *RowError) Is(target error) bool { return target == ErrWrite }

// markedTransient reports whether err is a [*RowError] that an Upserter
// judged transient.
func markedTransient(err error) bool {
	re, ok := err.(*RowError)
	return ok && re.transient
}

// An Upserter writes items of the struct type T to a table with the
// dialect's upsert. Its Write is the function of a
// [pipeline.ForEachBatch] or [pipeline.MapBatch]; [Upsert] adds that sink
// in one call. It is safe for concurrent use.
type Upserter[T any] struct {
	db       *stdsql.DB
	d        Dialect
	table    string
	cols     *upsertColumns
	batch    int
	perStmt  int // rows in one statement, at most
	classify resilience.Classifier
	skip     bool // UpsertOptions.SkipUnchanged
	affected atomic.Int64
	retries  atomic.Int64 // batches written again whole
	strict   atomic.Bool  // MySQL: the session's sql_mode was found strict (see checkMode)

	mu     sync.Mutex
	stmts  map[int]string // statement text by its rows (see statement)
	recent []int          // the rows of the cached statements that are not pinned, least recently used first
}

// recentStatements is how many statements of other sizes than a full
// batch's an Upserter keeps (see statement).
const recentStatements = 4

// NewUpserter returns an Upserter of T's columns (see [Query] for how
// fields map to columns) into o.Table of db, or an error matching
// [ErrUpsertOptions] that names every problem of the options.
func NewUpserter[T any](db *stdsql.DB, d Dialect, o UpsertOptions) (*Upserter[T], error) {
	var problems []string
	if db == nil {
		problems = append(problems, "db is nil")
	}
	if d.name == "" {
		problems = append(problems, "the dialect is the zero Dialect: use SQLite, Postgres or MySQL")
	}
	if o.Table == "" {
		problems = append(problems, "Table is empty")
	}
	if o.BatchSize < 0 {
		problems = append(problems, fmt.Sprintf("BatchSize %d is negative", o.BatchSize))
	}
	if o.Linger < 0 {
		problems = append(problems, fmt.Sprintf("Linger %s is negative", o.Linger))
	}
	if o.MaxParams < 0 {
		problems = append(problems, fmt.Sprintf("MaxParams %d is negative", o.MaxParams))
	}
	cols, err := columnsOf(reflect.TypeFor[T]())
	if err != nil {
		problems = append(problems, err.Error())
	}
	u := &Upserter[T]{db: db, d: d, table: o.Table, cols: cols, batch: o.BatchSize, classify: Classifier(d), skip: o.SkipUnchanged, stmts: map[int]string{}}
	if u.batch == 0 {
		u.batch = DefaultBatchSize
	}
	if cols != nil {
		if len(o.Key) > 0 {
			cols.keys = slices.Clone(o.Key)
		}
		if len(cols.keys) == 0 {
			problems = append(problems, fmt.Sprintf("no conflict key: set Key or tag the key fields of %s, db:\"id,key\"", reflect.TypeFor[T]()))
		}
		for _, k := range cols.keys {
			if !slices.Contains(cols.names, k) {
				problems = append(problems, fmt.Sprintf("Key column %q is not a column of %s (its columns: %s)", k, reflect.TypeFor[T](), strings.Join(cols.names, ", ")))
			}
		}
		limit := o.MaxParams
		if limit == 0 {
			limit = d.maxParams()
		}
		if u.perStmt = limit / len(cols.names); u.perStmt < 1 {
			problems = append(problems, fmt.Sprintf("MaxParams %d is less than the %d columns of one row", limit, len(cols.names)))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrUpsertOptions, strings.Join(problems, "; "))
	}
	return u, nil
}

// Upsert adds a sink named name that writes the items of in to a table
// with the dialect's upsert, in batches of o.BatchSize rows, one
// transaction per batch, and returns nothing: the stream ends there. It is
// [pipeline.ForEachBatch] with the Write of [NewUpserter]; opts are the
// node's options (Buffer, NodeResilience).
//
// A batch that the database refuses for a row (a constraint, bad data) is
// split in halves, each written in its own transaction, until the row is
// alone: every other row is written, and the row fails alone with its
// [*RowError], permanent, which the node's OnItemFailure handles (with
// resilience.DeadLetter, a dead letter naming the constraint). A batch
// that fails for a transient reason (a deadlock, a lost connection) is not
// split: it is written again whole, once, at once, and if that fails too
// each of its rows is retried alone by layer 1. A batch refused for a
// reason no row causes (a missing column) is not split either: every row
// gets the one error, matching [ErrStatement], permanent.
//
// When the options cannot work (see NewUpserter), Upsert still adds the
// node, and the pipeline's Build fails with an error that names the node
// and matches [ErrUpsertOptions], joined with the pipeline's other
// problems.
func Upsert[T any](b *pipeline.Builder, name string, in pipeline.Stream[T], db *stdsql.DB, d Dialect, o UpsertOptions, opts ...pipeline.NodeOption) {
	u, err := NewUpserter[T](db, d, o)
	if err != nil {
		// The node is added so that Build names it and the rest of the
		// graph is checked; its function never runs.
		refused := func(context.Context, []T) []error { return nil }
		pipeline.ForEachBatch(b, name, in, 1, 0, refused, append(slices.Clone(opts), pipeline.Refuse(err))...)
		return
	}
	pipeline.ForEachBatch(b, name, in, u.batch, o.Linger, u.Write, opts...)
}

// BatchSize returns the rows the Upserter writes in one transaction, the
// size of slice Write is meant for.
func (u *Upserter[T]) BatchSize() int { return u.batch }

// RowsAffected returns the rows that the Upserter's statements affected,
// as the database counts them, over the transactions that committed
// (a batch that failed, and one whose COMMIT failed, add nothing):
//
//   - PostgreSQL and SQLite: one for each row inserted and each row
//     updated. With SkipUnchanged, a row already there as written is not
//     updated: the count is of the rows inserted or changed.
//   - MySQL and MariaDB: their affected rows (without the client flag
//     CLIENT_FOUND_ROWS, go-sql-driver/mysql's default): one for a row
//     inserted, two for a row changed, none for a row already there as
//     written, with or without SkipUnchanged. A multi-row statement gives
//     only the sum, so rows inserted and rows changed cannot be told apart.
//
// A row written twice, in two batches or twice in one, counts each time
// the database wrote it.
func (u *Upserter[T]) RowsAffected() int64 { return u.affected.Load() }

// BatchRetries returns how many times the Upserter wrote a batch (or a
// half of one, while it split) again whole, at once, after a transient
// failure, before handing its rows to layer 1. These retries are not
// layer 1's: they are not in the node's ItemRetries, nor charged to a
// retry budget.
func (u *Upserter[T]) BatchRetries() int64 { return u.retries.Load() }

// Write upserts items in one transaction (in one statement without a
// transaction when one statement holds them all) and returns nil when
// every row was written, else one error per item, nil for each row
// written. Each error is a [*RowError].
//
// When the database refuses the batch for a row's reason (a constraint,
// bad data: SQLSTATE classes 22 and 23 and 21000, MySQL's and SQLite's
// codes for the same), Write splits it in halves and writes each in a
// transaction of its own, down to single rows: the row that fails alone
// gets its error, marked permanent with [resilience.MarkPermanent], and
// every other row is written. When the reason is transient (see
// [Classifier]), Write writes the batch again whole, once, at once; when
// that fails too, every row gets the error, marked transient, so that
// layer 1 retries it alone. When the COMMIT fails without an answer from
// the database (an error without a code, a lost connection), the rows may
// or may not be written: the error matches [ErrCommitUnknown] and is
// transient; writing them again is safe, since an upsert is idempotent.
// A batch written in one statement without a transaction is its own
// COMMIT: an error without a code is unknown in the same way. An error
// without a code from a statement in a transaction (a connection lost)
// is transient: the transaction did not commit. Any other error is the
// statement's, not a row's: every row gets it, matching [ErrStatement],
// permanent, without a split. Once ctx is done, the rows
// not written get ctx's error (with ErrCommitUnknown when it ended a
// COMMIT or the one statement).
//
// With the MySQL dialect, Write first asks the session's sql_mode, until
// one answer is strict (STRICT_TRANS_TABLES or STRICT_ALL_TABLES); while
// it is not, it writes nothing, and every row gets an error matching
// ErrStatement, permanent, that names sql_mode (see [MySQL]).
func (u *Upserter[T]) Write(ctx context.Context, items []T) []error {
	if len(items) == 0 {
		return nil
	}
	errs := make([]error, len(items))
	if err := u.checkMode(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if !u.write(ctx, items, errs, false) {
		return nil
	}
	return errs
}

// write upserts items, splitting them on a row's error, and reports
// whether any failed, setting its error in errs. retried says the items
// were written again already after a transient failure.
func (u *Upserter[T]) write(ctx context.Context, items []T, errs []error, retried bool) (failed bool) {
	raw, atCommit := u.exec(ctx, items)
	if raw == nil {
		return false
	}
	if ctx.Err() != nil {
		// The run stops: no split, no verdict. A COMMIT that ctx ended
		// may have been written.
		err := context.Cause(ctx)
		if atCommit {
			err = fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		}
		for i := range errs {
			errs[i] = err
		}
		return true
	}
	e := inspectTree(u.d, raw)
	re := &RowError{Table: u.table, Constraint: e.constraint, Column: e.column, Code: e.code, Err: raw}
	switch {
	case e.row || argumentError(raw):
		if len(items) > 1 {
			mid := len(items) / 2
			a := u.write(ctx, items[:mid], errs[:mid], false)
			b := u.write(ctx, items[mid:], errs[mid:], false)
			return a || b
		}
	case atCommit && (e.code == "" || e.conn):
		// No answer: the COMMIT may have been written.
		re.Err = fmt.Errorf("%w: %w", ErrCommitUnknown, raw)
		re.transient = true
	case u.classify.IsTransient(raw):
		re.transient = true
	case e.code == "":
		// Not the database's answer but the connection's or the
		// driver's (a connection lost in a transaction, io.EOF): the
		// transaction did not commit, and another attempt may pass.
		re.transient = true
	default:
		re.Err = fmt.Errorf("%w: %w", ErrStatement, raw)
	}
	if re.transient && !retried && len(items) > 1 {
		// A deadlock, a lost connection: the batch is likely to pass
		// now, and n rows retried one by one cost n statements and n
		// retries of the node's budget.
		u.retries.Add(1)
		clear(errs)
		return u.write(ctx, items, errs, true)
	}
	var err error = resilience.MarkPermanent(re)
	if re.transient {
		err = resilience.MarkTransient(re)
	}
	for i := range errs {
		errs[i] = err
	}
	return true
}

// checkMode makes sure, for MySQL and MariaDB, that the session's
// sql_mode is strict (STRICT_TRANS_TABLES or STRICT_ALL_TABLES): without
// it the server does not refuse a value too long for its column or a
// NULL for a NOT NULL one, but cuts it or writes an empty value, and
// reports the row written. It asks once a Write on one of the pool's
// connections, until it finds the mode strict; after that it trusts the
// pool's other connections, which the same DSN opened, to be so too.
// A mode that is not strict is every row's error, matching
// [ErrStatement], permanent; a question that fails is the rows' error as
// a statement's would be.
func (u *Upserter[T]) checkMode(ctx context.Context) error {
	if u.d.name != MySQL.name || u.strict.Load() {
		return nil
	}
	var mode string
	err := u.db.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		e := inspectTree(u.d, err)
		re := &RowError{Table: u.table, Code: e.code, Err: fmt.Errorf("reading the session's sql_mode: %w", err)}
		if e.code == "" || u.classify.IsTransient(err) {
			re.transient = true
			return resilience.MarkTransient(re)
		}
		re.Err = fmt.Errorf("%w: %w", ErrStatement, re.Err)
		return resilience.MarkPermanent(re)
	}
	for m := range strings.SplitSeq(mode, ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			u.strict.Store(true)
			return nil
		}
	}
	return resilience.MarkPermanent(&RowError{Table: u.table, Err: fmt.Errorf(
		"%w: the session's sql_mode %q has neither STRICT_TRANS_TABLES nor STRICT_ALL_TABLES: "+
			"without them the server would cut a value too long for its column, or write a NULL "+
			"into a NOT NULL column as an empty value, and report the row written; "+
			"set one on the server or in the DSN (sql_mode=%%27STRICT_ALL_TABLES%%27)", ErrStatement, mode)})
}

// argumentError reports whether err is a refusal of an argument before
// the statement was sent: database/sql's (a driver.Valuer that failed, a
// value of a type the driver does not take) or pgx's (a value its
// column's type cannot hold, an int of 3e9 for an int4). One row's value
// may be at fault, so the batch is split. Neither error's type is
// exported; their texts are fixed: "sql: converting argument $1 type:
// ..." and "failed to encode args[4]: ...".
func argumentError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "sql: converting argument ") || strings.Contains(msg, "failed to encode args[")
}

// exec writes items in one transaction, or in one statement alone when
// it holds them all. atCommit says the error came from the COMMIT, or
// from the one statement written without a transaction, which is its
// own COMMIT.
func (u *Upserter[T]) exec(ctx context.Context, items []T) (err error, atCommit bool) {
	if len(items) <= u.perStmt {
		res, err := u.db.ExecContext(ctx, u.statement(len(items)), u.args(nil, items)...)
		if err == nil {
			u.affected.Add(rowsAffected(res))
		}
		return err, true
	}
	tx, err := u.db.BeginTx(ctx, nil)
	if err != nil {
		return err, false
	}
	var args []any
	var affected int64
	for start := 0; start < len(items); start += u.perStmt {
		chunk := items[start:min(start+u.perStmt, len(items))]
		args = u.args(args[:0], chunk)
		res, err := tx.ExecContext(ctx, u.statement(len(chunk)), args...)
		if err != nil {
			_ = tx.Rollback() // the statement's error is the one to report
			return err, false
		}
		affected += rowsAffected(res)
	}
	if err := tx.Commit(); err != nil {
		return err, true
	}
	u.affected.Add(affected)
	return nil, false
}

// rowsAffected is res's count of rows affected; 0 from a driver that
// cannot say.
func rowsAffected(res stdsql.Result) int64 {
	n, err := res.RowsAffected()
	if err != nil {
		return 0
	}
	return n
}

// args appends the values of items' columns to args, row by row.
func (u *Upserter[T]) args(args []any, items []T) []any {
	args = slices.Grow(args, len(items)*len(u.cols.names))
	for i := range items {
		args = u.cols.appendArgs(args, reflect.ValueOf(&items[i]).Elem())
	}
	return args
}

// statement returns the upsert of rows rows. The statements of a full
// batch (one of BatchSize rows, or, when a batch takes several, one of
// perStmt rows and one of the rest) are made once and kept; of the other
// sizes (a part batch, the halves of a split) only the recentStatements
// used last are kept, since their sizes vary without end and a statement
// of 1,000 rows of 10 columns is about 60 KB.
func (u *Upserter[T]) statement(rows int) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	pinned := rows == min(u.batch, u.perStmt) || (u.batch > u.perStmt && rows == u.batch%u.perStmt)
	s, ok := u.stmts[rows]
	if !ok {
		s = upsertSQL(u.d, u.table, u.cols.names, u.cols.keys, rows, u.skip)
		u.stmts[rows] = s
	}
	if pinned {
		return s
	}
	if i := slices.Index(u.recent, rows); i >= 0 {
		u.recent = slices.Delete(u.recent, i, i+1)
	}
	u.recent = append(u.recent, rows)
	if len(u.recent) > recentStatements {
		delete(u.stmts, u.recent[0])
		u.recent = slices.Delete(u.recent, 0, 1)
	}
	return s
}

// upsertSQL is the dialect's multi-row upsert of rows rows of cols into
// table, whose conflict key is keys:
//
//	PostgreSQL, SQLite: INSERT ... ON CONFLICT (keys) DO UPDATE SET c = excluded.c
//	MySQL, MariaDB:     INSERT ... ON DUPLICATE KEY UPDATE c = VALUES(c)
//
// With skip, PostgreSQL's and SQLite's update has a WHERE that leaves a
// row alone unless a column differs: WHERE (c, ...) IS DISTINCT FROM
// (excluded.c, ...), IS NOT on SQLite. MySQL never writes a row whose
// values do not change.
//
// MySQL's VALUES() is deprecated from 8.0.20 in favour of a row alias,
// which MariaDB does not take; both still take VALUES().
func upsertSQL(d Dialect, table string, cols, keys []string, rows int, skip bool) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(d.ident(table))
	b.WriteString(" (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.ident(c))
	}
	b.WriteString(") VALUES ")
	n := 0
	for r := range rows {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for i := range cols {
			if i > 0 {
				b.WriteString(", ")
			}
			n++
			b.WriteString(d.placeholder(n))
		}
		b.WriteByte(')')
	}
	var update []string
	for _, c := range cols {
		if slices.Contains(keys, c) {
			continue
		}
		q := d.ident(c)
		if d.name == MySQL.name {
			update = append(update, q+" = VALUES("+q+")")
		} else {
			update = append(update, q+" = excluded."+q)
		}
	}
	if d.name == MySQL.name {
		b.WriteString(" ON DUPLICATE KEY UPDATE ")
		if len(update) == 0 {
			// Every column is the key: nothing to update, but the
			// statement needs an assignment.
			q := d.ident(keys[0])
			update = append(update, q+" = "+q)
		}
		b.WriteString(strings.Join(update, ", "))
		return b.String()
	}
	b.WriteString(" ON CONFLICT (")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.ident(k))
	}
	if len(update) == 0 {
		b.WriteString(") DO NOTHING")
		return b.String()
	}
	b.WriteString(") DO UPDATE SET ")
	b.WriteString(strings.Join(update, ", "))
	if skip {
		var old, now []string
		for _, c := range cols {
			if !slices.Contains(keys, c) {
				old = append(old, d.ident(table)+"."+d.ident(c))
				now = append(now, "excluded."+d.ident(c))
			}
		}
		differ := " IS DISTINCT FROM "
		if d.name == SQLite.name {
			differ = " IS NOT "
		}
		b.WriteString(" WHERE (" + strings.Join(old, ", ") + ")" + differ + "(" + strings.Join(now, ", ") + ")")
	}
	return b.String()
}
