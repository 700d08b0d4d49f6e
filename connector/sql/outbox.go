package sql

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// outboxRetries is how many times the outbox tries again a read or a
// delete that failed, before it reports the failure: waits of a quarter,
// a half and a whole PollInterval between the tries.
const outboxRetries = 3

// An OutboxSource is the source that [Outbox] returns. It implements
// node.Source, node.Opener, node.Closer and deadletter.DeadLetterWriter.
// Run, Open and Close are called one at a time, as the pipeline does.
type OutboxSource[T any] struct {
	db   *stdsql.DB
	d    Dialect
	opts OutboxOptions

	q        *outboxSQL    // the statements, built at the first Open
	scan     scanner[T]    // built at the first Open
	inFlight chan struct{} // a slot per row emitted and not yet deleted; made at the first Open
	letters  broker.Letters

	mu      sync.Mutex
	rows    map[int64]rowEntry // rows emitted and not yet forgotten
	settled []int64            // keys to delete, in settling order
	err     error              // the last delete's error, until Run takes it
	runs    int                // Runs started: a delete reports to the Run it started in
	wake    chan struct{}      // cap 1: there is something to delete
	failed  chan struct{}      // cap 1: err was set

	deleter  *deleter // the running goroutine, nil when none
	ownClock bool     // OutboxOptions.Clock was set: SetClock keeps it
}

// The statements of an outbox.
type outboxSQL struct {
	first string // the first page of a pass
	read  string // a later page, with one argument: the key after which
	set   string // "DELETE FROM t WHERE key IN " or the UPDATE that marks
	cols  []string
}

// A rowEntry is where an emitted row stands.
type rowEntry struct {
	state rowState
	at    time.Time // for rowFailed: when its item failed
}

// A rowState is where an emitted row stands.
type rowState uint8

const (
	rowInFlight rowState = iota // emitted, not settled
	rowSettled                  // settled, to delete
	rowDone                     // deleted, or left for the next run: forget it at the next read
	rowFailed                   // its item ended Failed while the run goes on: emit it again after PollInterval
)

// A deleter is the goroutine that deletes settled rows.
type deleter struct {
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
}

// Outbox returns a source that reads the outbox table opts.Table of db,
// whose SQL is d's, into items of type T: a service inserts a row in the
// transaction of its business change, and the source emits it, in the
// order of the table's increasing key, and deletes it (or marks it, see
// [OutboxOptions].MarkColumn) once its item settled.
//
// T is a struct; its fields take columns by the rules of the package
// documentation ("Columns"), as [Query]'s and [Upsert]'s do, and the
// source reads those columns. Give the key a field too, so that the item
// carries it: delivery is at least once (see below), and a sink that
// writes by the key is idempotent. Options are checked at Open, every
// problem joined and named by field ([OutboxOptionError]); on SQLite,
// Open also refuses a table whose key SQLite may give again (see
// [OutboxOptions].Key).
//
// A row is settled, and deleted, when its item's outcome is Delivered,
// Filtered, Skipped or DeadLettered: the pipeline is done with it, on
// purpose. An item that ends Failed or Rejected leaves its row in the
// table. Failed while the run goes on (a blameless failure, such as
// idempotency.ErrInProgress under the DeadLetter action) is the engine's
// "its source delivers it again": the source emits the row again, at its
// first read from the start of the table once PollInterval passed since,
// so that a busy key is not hammered. Failed because the run ended, and
// Rejected, leave the row for the next run.
//
// Deleting follows settling, asynchronously: the done callback hands the
// key to a goroutine of the source that deletes settled rows in batches
// (DELETE ... WHERE key IN (...)), and Close deletes what is left once the
// run's callbacks ran. A crash between the settling and the delete leaves
// the row, which the next run emits again: delivery is at least once. A
// delete that fails is tried again by that goroutine, three times, after
// waits on Clock; if it still fails, its keys stay held, and Run fails
// with it, so that the source's layers run it again, and Close tries once
// more. A read that fails is tried again the same way, then fails Run.
//
// After a read that found fewer rows than a page, the source waits
// PollInterval and reads again from the start of the table, until its
// context ends; so does it when PollInterval passed since the last read
// from the start. Reading from the start finds a row whose transaction
// committed after a row with a higher key was read (keys are taken in
// insert order, and transactions commit in any order): such a row is
// emitted late, after rows with higher keys. A row in flight, or settled
// and not yet deleted, is not emitted again however often the source is
// restarted.
//
// A row that does not scan into T (a NULL in a field that cannot hold
// one, text in an integer) is dead-lettered by the source, as a map of
// its columns' values, with an [*OutboxError] naming the table, the key
// and the column, and then deleted. Without a dead-letter sink in the
// pipeline, it fails Run with that error, permanent, and stays.
//
// One source reads one table: it takes no row locks, so two readers of a
// table, in one process or two, may both emit a row (no row is lost, but
// rows go out twice). Scale out behind the outbox, with a broker, not
// with more readers.
func Outbox[T any](db *stdsql.DB, d Dialect, opts OutboxOptions) *OutboxSource[T] {
	return &OutboxSource[T]{
		db: db, d: d, opts: opts.withDefaults(), ownClock: opts.Clock != nil,
		rows:   map[int64]rowEntry{},
		wake:   make(chan struct{}, 1),
		failed: make(chan struct{}, 1),
	}
}

// SetClock makes the outbox wait on clock, unless OutboxOptions.Clock set
// one: the pipeline calls it at the start of each run with its own
// (pipeline.WithClock), so that a test's fake clock drives the polls and
// the retries. It keeps the clock it has while its deleting goroutine
// runs, from its first Run to Close.
func (o *OutboxSource[T]) SetClock(clock clockwork.Clock) {
	if !o.ownClock && clock != nil && o.deleter == nil {
		o.opts.Clock = clock
	}
}

// Open checks the options, the item type and, on SQLite, the table's key,
// and returns every problem joined ([ErrOutboxOptions]). Run opens the
// source itself when Open was not called.
func (o *OutboxSource[T]) Open(ctx context.Context) error {
	if o.q != nil {
		return nil
	}
	var errs []error
	if o.db == nil {
		errs = append(errs, errors.New("sql: Outbox: the *sql.DB is nil"))
	}
	if o.d.name == "" {
		errs = append(errs, errors.New("sql: Outbox: the zero Dialect: use SQLite, Postgres or MySQL"))
	}
	errs = append(errs, o.opts.Validate())
	if o.d.name != "" && o.opts.DeleteBatch > o.d.maxParams() {
		errs = append(errs, &OutboxOptionError{Field: "DeleteBatch",
			Problem: fmt.Sprintf("%d is above %d, the most placeholders a statement of %s takes", o.opts.DeleteBatch, o.d.maxParams(), o.d)})
	}
	var sc scanner[T]
	if t := reflect.TypeFor[T](); t.Kind() != reflect.Struct {
		errs = append(errs, fmt.Errorf("sql: Outbox: the item type %s is not a struct", t))
	} else if s, err := newScanner[T](); err != nil {
		errs = append(errs, fmt.Errorf("sql: Outbox: %w", err))
	} else if err := s.bind(s.columns()); err != nil {
		errs = append(errs, fmt.Errorf("sql: Outbox: %w", err))
	} else {
		sc = s
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if o.d.name == SQLite.name {
		if err := o.checkSQLiteKey(ctx); err != nil {
			return err
		}
	}
	o.scan = sc
	o.inFlight = make(chan struct{}, o.opts.MaxInFlight)
	o.q = buildOutboxSQL(o.d, o.opts, sc.columns())
	return nil
}

// buildOutboxSQL writes the statements of an outbox whose item reads
// cols.
func buildOutboxSQL(d Dialect, opts OutboxOptions, cols []string) *outboxSQL {
	q := &outboxSQL{cols: cols}
	table, key := d.ident(opts.Table), d.ident(opts.Key)
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = d.ident(c)
	}
	// The first page of a pass has no key condition, rather than one
	// with the lowest int64, which a narrower key column cannot take.
	where, unmarked := " WHERE "+key+" > "+d.placeholder(1), ""
	if opts.MarkColumn != "" {
		unmarked = d.ident(opts.MarkColumn) + " IS NULL"
		where += " AND " + unmarked
		unmarked = " WHERE " + unmarked
		q.set = "UPDATE " + table + " SET " + d.ident(opts.MarkColumn) + " = CURRENT_TIMESTAMP WHERE " + key + " IN "
	} else {
		q.set = "DELETE FROM " + table + " WHERE " + key + " IN "
	}
	sel := "SELECT " + key + ", " + strings.Join(quoted, ", ") + " FROM " + table
	order := " ORDER BY " + key + " LIMIT " + strconv.Itoa(opts.PageSize)
	q.first = sel + unmarked + order
	q.read = sel + where + order
	return q
}

// checkSQLiteKey refuses a SQLite table whose key is an alias of the
// rowid without AUTOINCREMENT: SQLite gives the key of the deleted row
// with the highest key to the next row inserted, and a delete of the
// old row tried again (its answer was lost) would delete the new one
// before it was emitted. The table is looked up as SQLite finds it, its
// name in any case; a table it does not find fails Open, since the check
// would otherwise be skipped. AUTOINCREMENT and WITHOUT ROWID are read
// from the DDL without its literals, quoted names and comments, so that
// the words in a DEFAULT, a CHECK or a column's name count for nothing.
func (o *OutboxSource[T]) checkSQLiteKey(ctx context.Context) error {
	schema, name, dotted := strings.Cut(o.opts.Table, ".")
	schemas := []string{schema}
	if !dotted {
		// An unqualified name is a temp table's first, as SQLite reads it.
		schemas, name = []string{"temp", "main"}, o.opts.Table
	}
	var ddl string
	found := false
	for _, sch := range schemas {
		err := o.db.QueryRowContext(ctx, "SELECT sql FROM "+o.d.ident(sch)+".sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", name).Scan(&ddl)
		if errors.Is(err, stdsql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sql: outbox %s: read the table's schema: %w", o.opts.Table, err)
		}
		schema, found = sch, true
		break
	}
	if !found {
		return &OutboxOptionError{Field: "Table", Problem: fmt.Sprintf(
			"no SQLite table %s (in %s): the outbox cannot check its key", o.opts.Table, strings.Join(schemas, " or "))}
	}
	rows, err := o.db.QueryContext(ctx, "SELECT name, type, pk FROM pragma_table_info(?, ?)", name, schema)
	if err != nil {
		return fmt.Errorf("sql: outbox %s: read the table's columns: %w", o.opts.Table, err)
	}
	defer rows.Close()
	pks, keyInt := 0, false
	for rows.Next() {
		var col, typ string
		var pk int
		if err := rows.Scan(&col, &typ, &pk); err != nil {
			return fmt.Errorf("sql: outbox %s: read the table's columns: %w", o.opts.Table, err)
		}
		if pk > 0 {
			pks++
			keyInt = keyInt || (strings.EqualFold(col, o.opts.Key) && strings.EqualFold(typ, "INTEGER"))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sql: outbox %s: read the table's columns: %w", o.opts.Table, err)
	}
	bare := sqliteBareDDL(ddl)
	if pks == 1 && keyInt && !sqliteWithoutRowid.MatchString(bare) && !sqliteAutoincrement.MatchString(bare) {
		return &OutboxOptionError{Field: "Key", Problem: fmt.Sprintf(
			"%q of the SQLite table %s is an INTEGER PRIMARY KEY without AUTOINCREMENT: SQLite gives a deleted row's key to the next row inserted, "+
				"which the outbox would take for the deleted row (declare it INTEGER PRIMARY KEY AUTOINCREMENT)", o.opts.Key, o.opts.Table)}
	}
	return nil
}

var (
	// AUTOINCREMENT is allowed only after PRIMARY KEY (its order and
	// conflict clause between), on the one INTEGER PRIMARY KEY column.
	sqliteAutoincrement = regexp.MustCompile(`(?i)\bPRIMARY\s+KEY(?:\s+(?:ASC|DESC))?(?:\s+ON\s+CONFLICT\s+[A-Z]+)?\s+AUTOINCREMENT\b`)
	sqliteWithoutRowid  = regexp.MustCompile(`(?i)\bWITHOUT\s+ROWID\b`)
	// A string literal, a quoted name ("", ``, []) or a comment.
	sqliteQuoted = regexp.MustCompile("'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`(?:[^`]|``)*`|\\[[^\\]]*\\]|--[^\\n]*|/\\*(?s:.*?)(?:\\*/|$)")
)

// sqliteBareDDL returns ddl with its literals, quoted names and comments
// each replaced by a space, so that only its keywords and bare names are
// left to match.
func sqliteBareDDL(ddl string) string {
	return sqliteQuoted.ReplaceAllString(ddl, " ")
}

// Run emits the rows of the table, then polls for new ones, until ctx
// ends; it returns ctx's cause then. It returns an error matching
// [ErrOutbox] when a read or a delete failed four times; a Run after it
// goes on without emitting again the rows in flight.
//
// Run starts the goroutine that deletes settled rows, which Close ends: a
// pipeline calls Close at the end of its run; a program that calls Run
// itself calls Close after it, once every item's done ran.
func (o *OutboxSource[T]) Run(ctx context.Context, out node.Emitter[T]) error {
	if err := o.Open(ctx); err != nil {
		return err
	}
	o.startDeleter()
	after := int64(math.MinInt64)
	pass := o.opts.Clock.Now()
	for {
		if err := o.takeErr(); err != nil {
			return err
		}
		page, err := o.readPage(ctx, after)
		if err != nil {
			return err
		}
		for _, r := range page {
			after = r.key
			if !o.admit(r.key) {
				continue // in flight, settled and not yet deleted, or failed a moment ago
			}
			if err := o.acquire(ctx); err != nil {
				o.forget(r.key)
				return err
			}
			if r.bad != nil {
				if err := o.deadLetter(ctx, r); err != nil {
					o.forget(r.key)
					<-o.inFlight
					return err
				}
				continue
			}
			if err := out.EmitTracked(ctx, r.item, o.done(r.key)); err != nil {
				return err
			}
		}
		if len(page) == o.opts.PageSize && o.opts.Clock.Since(pass) < o.opts.PollInterval {
			continue
		}
		if len(page) < o.opts.PageSize {
			if err := o.poll(ctx); err != nil {
				return err
			}
		}
		after, pass = math.MinInt64, o.opts.Clock.Now()
	}
}

// retryDelay is the wait before the n-th try again (from 1) of a read or
// a delete: a quarter, a half, then a whole PollInterval.
func (o *OutboxSource[T]) retryDelay(n int) time.Duration {
	return min(o.opts.PollInterval, o.opts.PollInterval/4<<(n-1))
}

// readPage reads the page after key after, trying again a read that
// failed (not a row that does not scan) outboxRetries times.
func (o *OutboxSource[T]) readPage(ctx context.Context, after int64) ([]row[T], error) {
	for n := 1; ; n++ {
		page, err := o.page(ctx, after)
		if err == nil || ctx.Err() != nil || n > outboxRetries {
			if err != nil && n > outboxRetries {
				err = resilience.MarkRetried(err, n)
			}
			return page, err
		}
		if err := broker.Wait(ctx, o.opts.Clock, o.retryDelay(n)); err != nil {
			return nil, err
		}
	}
}

// admit reports whether the row of key is new to the run, and then holds
// it as in flight.
func (o *OutboxSource[T]) admit(key int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.rows[key]; ok {
		return false
	}
	o.rows[key] = rowEntry{state: rowInFlight}
	return true
}

// forget lets go of a row admitted but not emitted.
func (o *OutboxSource[T]) forget(key int64) {
	o.mu.Lock()
	delete(o.rows, key)
	o.mu.Unlock()
}

// acquire takes a slot of MaxInFlight, waiting for one until ctx ends or
// a delete fails.
func (o *OutboxSource[T]) acquire(ctx context.Context) error {
	select {
	case o.inFlight <- struct{}{}:
		return nil
	default:
	}
	for {
		select {
		case o.inFlight <- struct{}{}:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-o.failed:
			if err := o.takeErr(); err != nil {
				return err
			}
		}
	}
}

// poll waits PollInterval, until ctx ends or a delete fails.
func (o *OutboxSource[T]) poll(ctx context.Context) error {
	t := o.opts.Clock.NewTimer(o.opts.PollInterval)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-o.failed:
		// A failed delete ends the wait: Run reports it at once.
		return o.takeErr()
	}
}

// done returns the callback of the item of the row of key: quick, it
// hands a settled key to the deleter, or lets go of a row left for a
// later pass or the next run.
func (o *OutboxSource[T]) done(key int64) func(node.Outcome) {
	return func(out node.Outcome) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch out {
		case node.Delivered, node.Filtered, node.Skipped, node.DeadLettered:
			o.rows[key] = rowEntry{state: rowSettled}
			o.settled = append(o.settled, key)
			select {
			case o.wake <- struct{}{}:
			default:
			}
		case node.Failed:
			// The run goes on (a blameless failure), or ended: in both
			// cases the row is emitted again, after PollInterval within
			// the run, at once by the next Run.
			o.rows[key] = rowEntry{state: rowFailed, at: o.opts.Clock.Now()}
			<-o.inFlight
		default:
			// Rejected, and any outcome this outbox does not know
			// (HandedOff: the outbox has no broker to hand items to): the
			// row stays for the next run.
			o.rows[key] = rowEntry{state: rowDone}
			<-o.inFlight
		}
	}
}

// Close ends the goroutine that deletes settled rows, once its current
// delete returned, and deletes (or marks) the settled rows left, with
// ctx. It returns an error matching [ErrOutbox] when that fails: those
// rows stay in the table, and the next run emits them again. The pipeline
// calls Close after every callback of the run's items ran.
func (o *OutboxSource[T]) Close(ctx context.Context) error {
	if d := o.deleter; d != nil {
		o.deleter = nil
		close(d.stop)
		select {
		case <-d.done:
		case <-ctx.Done():
			d.cancel()
			<-d.done
		}
		d.cancel()
	}
	o.takeErr()
	// The rows whose items failed in this run are forgotten: the next
	// run emits them at once. (A node restart calls Run again without
	// Close, and waits for them as the run did.)
	o.mu.Lock()
	for k, e := range o.rows {
		if e.state == rowFailed {
			delete(o.rows, k)
		}
	}
	o.mu.Unlock()
	if o.q == nil {
		return nil // never opened: nothing to delete
	}
	return o.deleteSettled(ctx)
}

// UseDeadLetter is how the pipeline gives the source its dead-letter sink
// (nil for none) and what it knows of the envelope, for the rows that do
// not scan (deadletter.DeadLetterWriter).
func (o *OutboxSource[T]) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	o.letters.Use(sink, base)
}
