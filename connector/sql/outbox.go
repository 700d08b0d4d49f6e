package sql

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// ErrOutbox is the sentinel of the errors of an [Outbox]: a read of the
// table or a delete (or mark) of its rows that failed. errors.As finds
// the [*OutboxError] with the table and the step.
var ErrOutbox = errors.New("sql: outbox")

// ErrOutboxOptions is the sentinel of an [OutboxOptions] that
// [NewOutbox] refuses: the error names each field that is wrong.
var ErrOutboxOptions = errors.New("sql: outbox options")

// An OutboxError is a step of an [Outbox] that failed: Op is "read",
// "delete" or "mark". It matches [ErrOutbox] with errors.Is and unwraps
// to the database's error.
type OutboxError struct {
	// Table is the outbox table.
	Table string
	// Op is the step that failed: "read", "delete" or "mark".
	Op string
	// After is, for a read, the key after which the page started
	// (math.MinInt64 for the start of the table); 0 for the other steps.
	After int64
	// Err is the database's error.
	Err error
}

// Error says which step failed on which table, and why.
func (e *OutboxError) Error() string {
	if e.Op == "read" && e.After != math.MinInt64 {
		return fmt.Sprintf("sql: outbox %s: read after key %d: %v", e.Table, e.After, e.Err)
	}
	return fmt.Sprintf("sql: outbox %s: %s: %v", e.Table, e.Op, e.Err)
}

// Is reports whether target is [ErrOutbox].
func (e *OutboxError) Is(target error) bool { return target == ErrOutbox }

// Unwrap returns the database's error.
func (e *OutboxError) Unwrap() error { return e.Err }

// OutboxOptions configure an [Outbox]. Only Table is required.
type OutboxOptions struct {
	// Table is the outbox table, as schema.table or table.
	Table string
	// Key is the column of the table's increasing integer key (a
	// BIGSERIAL, an AUTO_INCREMENT, an INTEGER PRIMARY KEY
	// AUTOINCREMENT); rows are read in its order. The default is "id".
	Key string
	// MarkColumn, when set, makes the outbox mark a settled row instead
	// of deleting it: it sets this nullable timestamp column to
	// CURRENT_TIMESTAMP, and reads only the rows where it is NULL.
	MarkColumn string
	// PageSize is the number of rows one read asks for; the default is
	// 100.
	PageSize int
	// PollInterval is how long the outbox waits, on Clock, after a read
	// found the table drained, before it reads again; the default is one
	// second.
	PollInterval time.Duration
	// MaxInFlight bounds the rows emitted and not yet deleted (or
	// marked): at the bound, the outbox waits for rows to settle before
	// it emits more. The default is 1000.
	MaxInFlight int
	// DeleteBatch is the most keys one DELETE (or UPDATE) names; the
	// default is 100.
	DeleteBatch int
	// Clock is what the poll waits on: give the pipeline's
	// (pipeline.WithClock), so that a test's fake clock drives both. The
	// default is the real clock.
	Clock clockwork.Clock
}

func (o *OutboxOptions) defaults() {
	if o.Key == "" {
		o.Key = "id"
	}
	if o.PageSize == 0 {
		o.PageSize = 100
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 1000
	}
	if o.DeleteBatch == 0 {
		o.DeleteBatch = 100
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
}

func (o *OutboxOptions) validate() error {
	var errs []error
	bad := func(field, why string) {
		errs = append(errs, fmt.Errorf("%w: %s %s", ErrOutboxOptions, field, why))
	}
	if o.Table == "" {
		bad("Table", "is empty")
	}
	if o.PageSize < 0 {
		bad("PageSize", "is negative")
	}
	if o.PollInterval < 0 {
		bad("PollInterval", "is negative")
	}
	if o.MaxInFlight < 0 {
		bad("MaxInFlight", "is negative")
	}
	if o.DeleteBatch < 0 {
		bad("DeleteBatch", "is negative")
	}
	return errors.Join(errs...)
}

// An Outbox is a source that reads an outbox table: a service inserts a
// row in the transaction of its business change, and the outbox emits it,
// in the order of the table's increasing key, and deletes it (or marks it,
// see [OutboxOptions].MarkColumn) once its item settled. It implements
// node.Source and node.Closer.
//
// Each row scans into a T, a struct whose fields carry `db:"column"` tags
// (fields without a tag, or tagged "-", are left alone); the outbox reads
// the tagged columns. Give the key a field too, so that the item carries
// it: delivery is at least once (see below), and a sink that writes by the
// key is idempotent.
//
// A row is settled, and deleted, when its item's outcome is Delivered,
// Filtered, Skipped or DeadLettered: the pipeline is done with it, on
// purpose. An item that ends Failed (the run ended first) or Rejected (it
// failed the run) leaves its row in the table, and the next run reads it
// again. Deleting follows settling, asynchronously: the done callback
// hands the key to a goroutine of the outbox that deletes settled rows in
// batches (DELETE ... WHERE key IN (...)), and Close deletes what is left
// once the run's callbacks ran. A crash between the settling and the
// delete leaves the row, which the next run emits again: delivery is at
// least once. A delete that fails keeps its keys for the next try and
// fails Run, so that the source's layers run it again, and Close tries
// once more.
//
// After a read that found fewer rows than a page, the outbox waits
// PollInterval and reads again from the start of the table, until its
// context ends; so does it when PollInterval passed since the last read
// from the start. Reading from the start finds a row whose transaction
// committed after a row with a higher key was read (keys are taken in
// insert order, and transactions commit in any order): such a row is
// emitted late, after rows with higher keys. Rows in flight, or settled
// and not yet deleted, are never emitted twice in a run, however often
// the source is restarted.
//
// One Outbox reads one table: it takes no row locks, so two readers of a
// table, in one process or two, may both emit a row (no row is lost, but
// rows go out twice). Scale out behind the outbox, with a broker, not
// with more readers.
type Outbox[T any] struct {
	db       *stdsql.DB
	dialect  Dialect
	opts     OutboxOptions
	first    string // the query of the first page of a pass
	read     string // the query of a later page, with one argument: the key after which
	set      string // "DELETE FROM t WHERE key IN " or the UPDATE that marks
	fields   [][]int
	inFlight chan struct{} // a slot per row emitted and not yet deleted

	mu      sync.Mutex
	rows    map[int64]rowState // rows emitted and not yet forgotten
	settled []int64            // keys to delete, in settling order
	err     error              // the last delete's error, until Run takes it
	runs    int                // Runs started: a delete reports to the Run it started in
	wake    chan struct{}      // cap 1: there is something to delete
	failed  chan struct{}      // cap 1: err was set

	deleter *deleter // the running goroutine, nil when none
}

// A rowState is where an emitted row stands.
type rowState uint8

const (
	rowInFlight rowState = iota // emitted, not settled
	rowSettled                  // settled, to delete
	rowDone                     // deleted, or left for the next run: forget it at the next read
)

// A deleter is the goroutine that deletes settled rows.
type deleter struct {
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
}

// NewOutbox returns an [Outbox] that reads the table opts.Table of db,
// whose SQL is d's, into items of type T (a struct with `db` tags). It
// returns an error matching [ErrOutboxOptions] when an option is wrong or
// T is not such a struct.
func NewOutbox[T any](db *stdsql.DB, d Dialect, opts OutboxOptions) (*Outbox[T], error) {
	opts.defaults()
	errs := []error{opts.validate()}
	if db == nil {
		errs = append(errs, fmt.Errorf("%w: the *sql.DB is nil", ErrOutboxOptions))
	}
	if d.name == "" {
		errs = append(errs, fmt.Errorf("%w: the Dialect is the zero Dialect", ErrOutboxOptions))
	}
	columns, fields, err := taggedFields(reflect.TypeFor[T]())
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrOutboxOptions, err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o := &Outbox[T]{
		db: db, dialect: d, opts: opts, fields: fields,
		inFlight: make(chan struct{}, opts.MaxInFlight),
		rows:     map[int64]rowState{},
		wake:     make(chan struct{}, 1),
		failed:   make(chan struct{}, 1),
	}
	table, key := d.ident(opts.Table), d.ident(opts.Key)
	cols := make([]string, len(columns))
	for i, c := range columns {
		cols[i] = d.ident(c)
	}
	// The first page of a pass has no key condition, rather than one
	// with the lowest int64, which a narrower key column cannot take.
	where, unmarked := " WHERE "+key+" > "+d.placeholder(1), ""
	if opts.MarkColumn != "" {
		unmarked = d.ident(opts.MarkColumn) + " IS NULL"
		where += " AND " + unmarked
		unmarked = " WHERE " + unmarked
		o.set = "UPDATE " + table + " SET " + d.ident(opts.MarkColumn) + " = CURRENT_TIMESTAMP WHERE " + key + " IN "
	} else {
		o.set = "DELETE FROM " + table + " WHERE " + key + " IN "
	}
	sel := "SELECT " + key + ", " + strings.Join(cols, ", ") + " FROM " + table
	order := " ORDER BY " + key + " LIMIT " + strconv.Itoa(opts.PageSize)
	o.first = sel + unmarked + order
	o.read = sel + where + order
	return o, nil
}

// taggedFields returns the columns of struct type t's fields tagged `db`,
// and the index of each field.
func taggedFields(t reflect.Type) ([]string, [][]int, error) {
	if t.Kind() != reflect.Struct {
		return nil, nil, fmt.Errorf("the item type %s is not a struct with `db` tags", t)
	}
	var columns []string
	var fields [][]int
	for _, f := range reflect.VisibleFields(t) {
		name, ok := f.Tag.Lookup("db")
		if !ok || name == "-" || !f.IsExported() {
			continue
		}
		if throughPointer(t, f.Index) {
			return nil, nil, fmt.Errorf("the field %s.%s is promoted through an embedded pointer", t, f.Name)
		}
		if name == "" {
			return nil, nil, fmt.Errorf("the field %s.%s has an empty `db` tag", t, f.Name)
		}
		columns = append(columns, name)
		fields = append(fields, f.Index)
	}
	if len(columns) == 0 {
		return nil, nil, fmt.Errorf("the item type %s has no field with a `db` tag", t)
	}
	return columns, fields, nil
}

// throughPointer reports whether the field at index of struct type t is
// reached through an embedded pointer, which a new T holds nil.
func throughPointer(t reflect.Type, index []int) bool {
	for _, i := range index[:len(index)-1] {
		t = t.Field(i).Type
		if t.Kind() == reflect.Pointer {
			return true
		}
	}
	return false
}

// Run emits the rows of the table, then polls for new ones, until ctx
// ends; it returns ctx's cause then. It returns an error matching
// [ErrOutbox] when a read or a delete failed; a Run after it goes on
// without emitting again the rows in flight. A row that does not scan into
// T (a NULL in a field that cannot hold one, say) fails Run with a
// permanent error naming the column: the row stays in the table.
//
// Run starts the goroutine that deletes settled rows, which Close ends: a
// pipeline calls Close at the end of its run; a program that calls Run
// itself calls Close after it, once every item's done ran.
func (o *Outbox[T]) Run(ctx context.Context, out node.Emitter[T]) error {
	o.startDeleter()
	after := int64(math.MinInt64)
	pass := o.opts.Clock.Now()
	for {
		if err := o.takeErr(); err != nil {
			return err
		}
		page, err := o.page(ctx, after)
		if err != nil {
			return err
		}
		for _, r := range page {
			after = r.key
			if !o.admit(r.key) {
				continue // in flight, or settled and not yet deleted
			}
			if err := o.acquire(ctx); err != nil {
				o.forget(r.key)
				return err
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

// A row is a row read: its key and its item.
type row[T any] struct {
	key  int64
	item T
}

// page reads the rows after key after, once it forgot the rows deleted
// before: a row deleted while the read runs may be in it, and is still
// known to be emitted.
func (o *Outbox[T]) page(ctx context.Context, after int64) ([]row[T], error) {
	o.mu.Lock()
	for k, s := range o.rows {
		if s == rowDone {
			delete(o.rows, k)
		}
	}
	o.mu.Unlock()
	readErr := func(err error) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return &OutboxError{Table: o.opts.Table, Op: "read", After: after, Err: err}
	}
	q, args := o.read, []any{after}
	if after == math.MinInt64 {
		q, args = o.first, nil
	}
	rs, err := o.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, readErr(err)
	}
	defer rs.Close()
	page := make([]row[T], 0, o.opts.PageSize)
	dest := make([]any, 1+len(o.fields))
	for rs.Next() {
		var r row[T]
		dest[0] = &r.key
		v := reflect.ValueOf(&r.item).Elem()
		for i, f := range o.fields {
			dest[1+i] = v.FieldByIndex(f).Addr().Interface()
		}
		if err := rs.Scan(dest...); err != nil {
			// A row that does not scan does not scan the next time either.
			return nil, resilience.MarkPermanent(readErr(err))
		}
		page = append(page, r)
	}
	if err := rs.Err(); err != nil {
		return nil, readErr(err)
	}
	return page, nil
}

// admit reports whether the row of key is new to the run, and then holds
// it as in flight.
func (o *Outbox[T]) admit(key int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.rows[key]; ok {
		return false
	}
	o.rows[key] = rowInFlight
	return true
}

// forget lets go of a row admitted but not emitted.
func (o *Outbox[T]) forget(key int64) {
	o.mu.Lock()
	delete(o.rows, key)
	o.mu.Unlock()
}

// acquire takes a slot of MaxInFlight, waiting for one until ctx ends or
// a delete fails.
func (o *Outbox[T]) acquire(ctx context.Context) error {
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
func (o *Outbox[T]) poll(ctx context.Context) error {
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
// hands a settled key to the deleter, or lets go of a row left for the
// next run.
func (o *Outbox[T]) done(key int64) func(node.Outcome) {
	return func(out node.Outcome) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch out {
		case node.Delivered, node.Filtered, node.Skipped, node.DeadLettered:
			o.rows[key] = rowSettled
			o.settled = append(o.settled, key)
			select {
			case o.wake <- struct{}{}:
			default:
			}
		default:
			// Failed, Rejected, and any outcome this outbox does not know
			// (HandedOff: the outbox has no broker to hand items to): the
			// row stays for the next run.
			o.rows[key] = rowDone
			<-o.inFlight
		}
	}
}

// takeErr returns the error of a failed delete, once.
func (o *Outbox[T]) takeErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	err := o.err
	o.err = nil
	select {
	case <-o.failed:
	default:
	}
	return err
}

// startDeleter starts the goroutine that deletes settled rows, unless it
// runs, and wakes it: a Run after a failed delete tries again. A delete
// that failed before, or that started before and fails later, is not this
// Run's failure.
func (o *Outbox[T]) startDeleter() {
	o.mu.Lock()
	o.runs++
	o.err = nil
	select {
	case <-o.failed:
	default:
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	if o.deleter != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &deleter{stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	o.deleter = d
	go func() {
		defer close(d.done)
		for {
			select {
			case <-d.stop:
				return
			case <-o.wake:
			}
			o.mu.Lock()
			run := o.runs
			o.mu.Unlock()
			if err := o.deleteSettled(ctx); err != nil {
				// A failure of a delete that started before the current
				// Run is not its: that Run woke this loop to try again.
				o.mu.Lock()
				if run == o.runs {
					o.err = err
					select {
					case o.failed <- struct{}{}:
					default:
					}
				}
				o.mu.Unlock()
			}
		}
	}()
}

// deleteSettled deletes (or marks) the settled rows, DeleteBatch keys at a
// time, until none is left or a delete fails; the keys of a failed delete
// stay settled, for the next try (a delete is idempotent, so one that
// failed after it committed does no harm when tried again).
func (o *Outbox[T]) deleteSettled(ctx context.Context) error {
	op := "delete"
	if o.opts.MarkColumn != "" {
		op = "mark"
	}
	for {
		o.mu.Lock()
		n := min(len(o.settled), o.opts.DeleteBatch)
		keys := o.settled[:n:n]
		o.mu.Unlock()
		if n == 0 {
			return nil
		}
		var q strings.Builder
		q.WriteString(o.set)
		q.WriteByte('(')
		args := make([]any, n)
		for i, k := range keys {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(o.dialect.placeholder(i + 1))
			args[i] = k
		}
		q.WriteByte(')')
		if _, err := o.db.ExecContext(ctx, q.String(), args...); err != nil {
			return &OutboxError{Table: o.opts.Table, Op: op, Err: err}
		}
		o.mu.Lock()
		// Only this goroutine, or Close after it ended, takes keys from
		// the front; callbacks append at the back.
		o.settled = o.settled[n:]
		for _, k := range keys {
			o.rows[k] = rowDone
			<-o.inFlight
		}
		o.mu.Unlock()
	}
}

// Close ends the goroutine that deletes settled rows, once its current
// delete returned, and deletes (or marks) the settled rows left, with
// ctx. It returns an error matching [ErrOutbox] when that fails: those
// rows stay in the table, and the next run emits them again. The pipeline
// calls Close after every callback of the run's items ran.
func (o *Outbox[T]) Close(ctx context.Context) error {
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
	return o.deleteSettled(ctx)
}
