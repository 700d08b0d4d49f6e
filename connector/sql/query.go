package sql

import (
	"bytes"
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/node"
)

// A Source reads the rows of a table or query in pages ordered by a unique
// key, and emits each as an item with its key as its position: see
// [Query]. It implements node.Source, node.Opener, node.Resumable,
// node.Sized and pipeline.ClockSetter. Run, Open and Resume are called one at a time, as the
// pipeline does; Size may be called from any goroutine.
type Source[T any] struct {
	db    *stdsql.DB
	d     Dialect
	opts  QueryOptions
	clock clockwork.Clock

	q    *querySQL  // the statements, built at the first Open
	scan scanner[T] // built at the first Open
	fp   uint64     // the fingerprint of the query's positions

	// after is the position of the last row emitted, or resumed from:
	// the next page starts after it. nil: at the start. afterPos is its
	// bytes, which the first row of the next page must not equal.
	after    position
	afterPos []byte
	counted  bool // the size of this run was counted
	checked  bool // this run looked for NULL in the key's columns
	size     atomic.Int64
}

// Query returns a source that reads the rows of a table (opts.Table) or
// of a SELECT (opts.From) through db, in the dialect d, in pages of
// opts.PageSize rows ordered by the unique key opts.Key:
//
//	SELECT columns FROM table WHERE (k1, k2) > (?, ?) ORDER BY k1, k2 LIMIT n
//
// never with OFFSET (see the package documentation; MySQL gets the
// condition written out). Each row is emitted with node.Emitter's EmitAt, at its
// key, so that with pipeline.WithCheckpoint a run that was stopped or
// crashed resumes after the last row that settled. A page that fails
// (a lost connection, a deadlock) fails Run; when the pipeline's node
// restart or retry runs it again, it goes on after the last row it
// emitted, and emits no row twice in one run.
//
// T is a struct or map[string]any. A struct's field takes the column its
// db tag names (`db:"name"`), or without a tag the column of its name in
// lower case; `db:"-"` and unexported fields take none, and the fields of
// an embedded struct without a tag count as T's own (those of an embedded
// pointer are not read). A column that may be
// NULL needs a field that takes NULL (a pointer, or sql.NullString and
// its kind): a NULL in another fails the run with a [*ScanError] naming
// the column. A field of type sql.RawBytes (or a pointer to one) is
// refused at Open: its bytes are the driver's, valid only until the next
// row, and a page is read whole; use []byte. A map holds every column
// read by its name, as the driver gives it, but text as a string when
// the driver gives []byte, and an unsigned integer that
// go-sql-driver/mysql gives as digits as a uint64.
//
// Options are checked at Open (see [QueryOptions.Validate]); the database
// is first queried there, to count the rows for Size. The source uses db's
// pool, one connection at a time, and holds none while it emits.
func Query[T any](db *stdsql.DB, d Dialect, opts QueryOptions) *Source[T] {
	opts.Key = append([]string(nil), opts.Key...)
	opts.Columns = append([]string(nil), opts.Columns...)
	opts.Args = append([]any(nil), opts.Args...)
	if opts.PageSize == 0 {
		opts.PageSize = DefaultPageSize
	}
	s := &Source[T]{db: db, d: d, opts: opts, clock: opts.Clock, fp: fingerprint(opts)}
	if s.clock == nil {
		s.clock = clockwork.NewRealClock()
	}
	s.size.Store(-1)
	return s
}

// Resume makes the next run start after pos, a position the source gave
// with a row (nil: at the start). It checks the position's bytes: the
// position of another query (one of another Table or From, Key or
// Watermark), or bytes no source gave, is an error that wraps
// [ErrPosition].
func (s *Source[T]) Resume(pos []byte) error {
	p, err := decodePosition(pos, s.fp, len(s.opts.order()))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrPosition, s.name(), err)
	}
	s.after, s.afterPos, s.counted, s.checked = p, bytes.Clone(pos), false, false
	s.size.Store(-1)
	return nil
}

// SetClock makes Follow's waits use clock, unless QueryOptions.Clock set
// one: the pipeline calls it at the start of each run with its own
// (pipeline.WithClock), so that a test's fake clock drives the polls.
func (s *Source[T]) SetClock(clock clockwork.Clock) {
	if s.opts.Clock == nil && clock != nil {
		s.clock = clock
	}
}

// Open checks the options and, at the first Open of a run, looks for
// rows with NULL in a key or watermark column, which the pages would
// never read (one query: see [KeyError]; a source that follows the table
// looks again at each poll), and, when the run does not
// follow the table, counts the rows left for Size. Run opens the source
// itself when Open was not called.
func (s *Source[T]) Open(ctx context.Context) error {
	if s.q == nil {
		var errs []error
		if s.db == nil {
			errs = append(errs, errors.New("sql: Query: the *sql.DB is nil"))
		}
		if s.d.name == "" {
			errs = append(errs, errors.New("sql: Query: the zero Dialect: use SQLite, Postgres or MySQL"))
		}
		errs = append(errs, s.opts.Validate())
		sc, err := newScanner[T]()
		if err != nil {
			errs = append(errs, fmt.Errorf("sql: Query: %w", err))
		} else if len(s.opts.Columns) > 0 {
			if err := sc.bind(s.opts.Columns); err != nil {
				errs = append(errs, &QueryOptionError{Field: "Columns", Problem: err.Error()})
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		s.scan = sc
		s.q = buildSQL(s.d, s.opts, sc)
	}
	if !s.counted && s.opts.Follow <= 0 {
		var n int64
		if err := s.db.QueryRowContext(ctx, s.q.count(s.after), s.q.args(s.after)...).Scan(&n); err != nil {
			return fmt.Errorf("sql: %s: count the rows: %w", s.name(), err)
		}
		s.size.Store(n)
		s.counted = true
	}
	if !s.checked {
		if err := s.checkNulls(ctx); err != nil {
			return err
		}
		s.checked = true
	}
	return nil
}

// Run emits the rows after the source's position, page by page, and
// returns nil after the last, or, when the source follows the table, goes
// on reading every QueryOptions.Follow until ctx is done. A Run after one
// that returned goes on after the last row emitted.
func (s *Source[T]) Run(ctx context.Context, out node.Emitter[T]) error {
	if s.q == nil || !s.checked || (!s.counted && s.opts.Follow <= 0) {
		if err := s.Open(ctx); err != nil {
			return err
		}
	}
	var pg page[T]
	for {
		n, err := s.readPage(ctx, &pg)
		if err != nil {
			return err
		}
		for i := range pg.items {
			if err := out.EmitAt(ctx, pg.items[i], pg.pos[i]); err != nil {
				if i > 0 {
					if perr := s.passed(pg.pos[i-1]); perr != nil {
						return errors.Join(err, perr)
					}
				}
				return err
			}
		}
		if n > 0 {
			if err := s.passed(pg.pos[n-1]); err != nil {
				return err
			}
		}
		if n == s.opts.PageSize {
			continue
		}
		if s.opts.Follow <= 0 {
			return nil
		}
		if err := broker.Wait(ctx, s.clock, s.opts.Follow); err != nil {
			return err
		}
		// A row that came with NULL in a key or watermark column while
		// the source waited would never be read: look again at each
		// poll, before its first page. A Run after the failure looks
		// again at its Open.
		if err := s.checkNulls(ctx); err != nil {
			s.checked = false
			return err
		}
	}
}

// passed moves the source past the row at pos, emitted. Its key is read
// from pos, made before the emit, never from the item: an emitted item
// is the nodes' downstream, and a map (or a slice in a struct) they
// change would change where the next page starts.
func (s *Source[T]) passed(pos []byte) error {
	p, err := decodePosition(pos, s.fp, len(s.opts.order()))
	if err != nil {
		return fmt.Errorf("sql: %s: the position of the last row emitted: %w", s.name(), err)
	}
	s.after, s.afterPos = p, pos
	return nil
}

// Size returns the number of rows the run reads, counted at Open, or -1
// when it is unknown: before Open, and when the source follows the table.
// Rows inserted after the count are read too, if their key is past the
// position, so the count is a snapshot, not a promise.
func (s *Source[T]) Size() int64 { return s.size.Load() }

// name names the source in errors: its table, or "query".
func (s *Source[T]) name() string {
	if s.opts.Table != "" {
		return s.opts.Table
	}
	return "query"
}

// A page is the rows of one page, read before any is emitted.
type page[T any] struct {
	items []T
	pos   [][]byte
	// extras holds, row after row, the values of the key columns that
	// the statement selects again after the item's (querySQL.extra).
	extras []any
	dst    []any // scan destinations, reused
	block  []byte
	// keySrc[i] is the column of the i-th value of the key: one of the
	// item's (below nItem), or an extra one.
	keySrc []int
	nItem  int
	kinds  []valueKind // how to read each column's values
}

// key returns the key of row i of the page: the source keeps only the
// last emitted row's, so it is made only then.
func (pg *page[T]) key(s *Source[T], i int) position {
	nExtra := len(s.q.extra)
	key := make(position, len(pg.keySrc))
	for j, c := range pg.keySrc {
		var v any
		if c < pg.nItem {
			v = s.scan.value(&pg.items[i], c)
		} else {
			v = pg.extras[i*nExtra+c-pg.nItem]
		}
		key[j] = pg.kinds[c].normalize(v)
	}
	return key
}

// before returns the key of the row before row i of the page: that of
// the page's row i-1, or after for the first.
func (pg *page[T]) before(s *Source[T], i int, after position) position {
	if i == 0 {
		return after
	}
	return pg.key(s, i-1)
}

// readPage reads the page after s.after into pg and returns its number of
// rows.
func (s *Source[T]) readPage(ctx context.Context, pg *page[T]) (int, error) {
	clear(pg.items)
	clear(pg.extras)
	pg.items, pg.pos, pg.extras = pg.items[:0], pg.pos[:0], pg.extras[:0]
	rows, err := s.db.QueryContext(ctx, s.q.page(s.after), s.q.args(s.after)...)
	if err != nil {
		return 0, s.pageError(ctx, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, s.pageError(ctx, err)
	}
	nItem := len(cols) - len(s.q.extra)
	if nItem < 0 {
		return 0, fmt.Errorf("sql: %s: the query returned %d columns, fewer than it orders by", s.name(), len(cols))
	}
	// keySrc[i] is the column the i-th value of a row's key comes from:
	// one of the item's, read back from the item, or one the statement
	// selects again at the end for the key.
	pg.nItem, pg.keySrc = nItem, pg.keySrc[:0]
	for _, c := range s.q.order {
		src := slices.Index(cols[:nItem], c)
		if j := slices.Index(s.q.extra, c); j >= 0 {
			src = nItem + j
		} else if src < 0 {
			return 0, fmt.Errorf("sql: %s: the key column %q is not among the columns the query returned", s.name(), c)
		}
		pg.keySrc = append(pg.keySrc, src)
	}
	types, err := rows.ColumnTypes()
	if err != nil {
		return 0, s.pageError(ctx, err)
	}
	pg.kinds = pg.kinds[:0]
	for _, t := range types {
		pg.kinds = append(pg.kinds, kindOf(t.DatabaseTypeName()))
	}
	if err := s.checkKeyTypes(types, cols, pg); err != nil {
		return 0, err
	}
	if err := s.scan.bind(cols[:nItem]); err != nil {
		return 0, fmt.Errorf("sql: %s: %w", s.name(), err)
	}
	s.scan.setKinds(pg.kinds[:nItem])
	if cap(pg.dst) < len(cols) {
		pg.dst = make([]any, len(cols))
	}
	dst := pg.dst[:len(cols)]
	nExtra := len(cols) - nItem
	for rows.Next() {
		// The item is scanned in its place in the page, which is
		// reused: clear made it zero, and EmitAt copies it.
		var zero T
		pg.items = append(pg.items, zero)
		item := &pg.items[len(pg.items)-1]
		s.scan.dests(item, dst)
		if nExtra > 0 {
			base := len(pg.extras)
			pg.extras = append(pg.extras, make([]any, nExtra)...)
			for j := range nExtra {
				dst[nItem+j] = &pg.extras[base+j]
			}
		}
		if err := rows.Scan(dst...); err != nil {
			pg.items = pg.items[:len(pg.items)-1]
			return 0, s.scanError(rows, cols, pg.keySrc, dst, pg.before(s, len(pg.items), s.after), err)
		}
		s.scan.done(item)
		i := len(pg.items) - 1
		pos, err := s.encode(pg, i)
		if err != nil {
			return 0, err
		}
		// A row whose key equals the one before it: a key that is not
		// unique (within the page), or, for the first row, a key the
		// database compares otherwise than the source passes it back.
		// Reading on would lose the rows that tie, or read one for ever.
		if i == 0 && s.after != nil && bytes.Equal(pos, s.afterPos) {
			return 0, &KeyError{Source: s.name(), Columns: s.q.order, Row: s.keyText(s.after),
				Problem: "the page after it starts with it again: the database compares the key otherwise than as the driver gave it (see the package documentation on times in SQLite)"}
		}
		if i > 0 && bytes.Equal(pos, pg.pos[i-1]) {
			return 0, &KeyError{Source: s.name(), Columns: s.q.order, Row: s.keyText(pg.key(s, i)),
				Problem: "two rows have this key: it is not unique, and the rows that tie with a page's last row would be lost"}
		}
		pg.pos = append(pg.pos, pos)
	}
	if err := rows.Err(); err != nil {
		return 0, s.pageError(ctx, err)
	}
	return len(pg.items), nil
}

// encode returns the position of row i of the page, cut from pg's block
// to save an allocation per row: the bytes of a position handed out are
// never written again, as the pipeline keeps them. A key value in one of
// the item's fields is written from the field, without boxing it.
func (s *Source[T]) encode(pg *page[T], i int) ([]byte, error) {
	if cap(pg.block)-len(pg.block) < 64 {
		pg.block = make([]byte, 0, 4096)
	}
	start := len(pg.block)
	b := appendHeader(pg.block, s.fp, len(pg.keySrc))
	nExtra := len(s.q.extra)
	for j, c := range pg.keySrc {
		if c < pg.nItem {
			if out, ok := s.scan.appendKey(b, &pg.items[i], c, pg.kinds[c]); ok {
				b = out
				continue
			}
		}
		var v any
		if c < pg.nItem {
			v = s.scan.value(&pg.items[i], c)
		} else {
			v = pg.extras[i*nExtra+c-pg.nItem]
		}
		out, err := appendValue(b, pg.kinds[c].normalize(v))
		if err != nil {
			return nil, &ScanError{Source: s.name(), Row: "after " + s.keyText(pg.before(s, i, s.after)), Column: s.q.order[j], Err: err}
		}
		b = out
	}
	pg.block = b
	return b[start:len(b):len(b)], nil
}

// pageError wraps err, an error of reading a page: the cancellation of
// ctx as it is, so that a drain or a stop is seen as one.
func (s *Source[T]) pageError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("sql: %s: read the page after %s: %w", s.name(), s.keyText(s.after), err)
}

// checkKeyTypes fails when a key or watermark column, whose type the
// page's column types give, is one the pages cannot order by, as rows
// would be left out without a word:
//
//   - on MySQL (MariaDB) an ENUM or SET, which the database orders by
//     the value's place in the type's list (its bits), while the next
//     page's condition compares it with the last row's value as text;
//   - a column that the item holds in a float field narrower than the
//     column (a DECIMAL, an integer, a double in a float32), which rounds
//     it: the next page's condition, k > the rounded value, skips the
//     rows that round to the same float.
func (s *Source[T]) checkKeyTypes(types []*stdsql.ColumnType, cols []string, pg *page[T]) error {
	for j, c := range pg.keySrc {
		t := strings.ToUpper(types[c].DatabaseTypeName())
		var problem string
		switch {
		case s.d.name == MySQL.name && (t == "ENUM" || t == "SET"):
			problem = fmt.Sprintf("column %q is of type %s, which MySQL and MariaDB order by the value's place in the type's list, not as the text the next page would compare it with, so rows would be lost: key by columns of other types (such as the primary key's id)", s.q.order[j], t)
		case c < pg.nItem && s.rounds(t, s.scan.floatBits(cols[c])):
			problem = fmt.Sprintf("column %q is a %s read into a float field narrower than it, which rounds it, so the next page would skip the rows that round to the same float: read it into a field of its own type (a string for a DECIMAL, an integer, a float64)", s.q.order[j], t)
		default:
			continue
		}
		return &KeyError{Source: s.name(), Columns: s.q.order, Problem: problem}
	}
	return nil
}

// rounds reports whether a key column of database type t (upper case)
// read into a float field of bits (0: not a float field) loses precision.
// An unknown type (an expression's, "") is taken not to.
func (s *Source[T]) rounds(t string, bits int) bool {
	if bits == 0 || t == "" {
		return false
	}
	mysql := s.d.name == MySQL.name
	switch {
	case t == "FLOAT4" || mysql && t == "FLOAT":
		return false // 4 bytes: any float field holds it
	case t == "FLOAT8" || t == "DOUBLE" || t == "DOUBLE PRECISION" || t == "REAL" || t == "FLOAT":
		return bits == 32
	}
	return true // an integer, a DECIMAL, or another type no float holds
}

// checkNulls fails when a row (of Where) has NULL in a key or watermark
// column: the pages' condition, k > ?, is never true for it, so it would
// be left out without a word.
func (s *Source[T]) checkNulls(ctx context.Context) error {
	n := make([]int64, len(s.q.order))
	dst := make([]any, len(n))
	for i := range n {
		dst[i] = &n[i]
	}
	if err := s.db.QueryRowContext(ctx, s.q.nulls, s.q.whereArgs...).Scan(dst...); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("sql: %s: look for NULL in the key: %w", s.name(), err)
	}
	for i, c := range n {
		if c > 0 {
			return &KeyError{Source: s.name(), Columns: s.q.order,
				Problem: fmt.Sprintf("%d rows have NULL in column %q, which no page would read: the key and watermark columns must be NOT NULL", c, s.q.order[i])}
		}
	}
	return nil
}

// keyText shows position p with its columns' names, for errors.
func (s *Source[T]) keyText(p position) string {
	if p == nil {
		return "the start"
	}
	parts := make([]string, len(p))
	for i, v := range p {
		parts[i] = fmt.Sprintf("%s=%v", s.q.order[i], v)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// A querySQL is the statements of a query: its pages and its count, from
// the start or after a position.
type querySQL struct {
	d          Dialect
	order      []string
	extra      []string // the key columns selected again, after the item's
	whereArgs  []any
	first      string // the first page
	next       string // a page after a position
	countFirst string
	countNext  string
	// nulls counts, for each column of order, the rows (of Where) with
	// NULL in it.
	nulls string
	// keyArgs says which value of the position each argument of the
	// key's condition is: a row-value comparison takes each once, the
	// expanded form some more than once.
	keyArgs []int
}

func (q *querySQL) page(after position) string {
	if after == nil {
		return q.first
	}
	return q.next
}

func (q *querySQL) count(after position) string {
	if after == nil {
		return q.countFirst
	}
	return q.countNext
}

// args returns the arguments of a statement after the position.
func (q *querySQL) args(after position) []any {
	if after == nil {
		return q.whereArgs
	}
	args := make([]any, 0, len(q.whereArgs)+len(q.keyArgs))
	args = append(args, q.whereArgs...)
	for _, i := range q.keyArgs {
		args = append(args, after[i])
	}
	return args
}

// buildSQL writes the statements of a query whose items sc scans.
func buildSQL[T any](d Dialect, opts QueryOptions, sc scanner[T]) *querySQL {
	q := &querySQL{d: d, order: opts.order(), whereArgs: opts.Args}
	cols := opts.Columns
	if len(cols) == 0 {
		cols = sc.columns()
	}
	var sel strings.Builder
	if cols == nil {
		sel.WriteString("*")
	}
	for i, c := range cols {
		if i > 0 {
			sel.WriteString(", ")
		}
		sel.WriteString(d.ident(c))
	}
	// A key column that the item does not hold, or holds in a type a
	// position does not, is selected again at the end, where the source
	// reads the key from. On SQLite every key column but one an integer
	// field holds is selected again as +"c": an expression, which has no
	// declared type, so that the driver gives the value as SQLite stores
	// it (a time as the text it wrote, not parsed), and the next page
	// compares the column with that very value.
	sqlite := d.name == SQLite.name
	for _, c := range q.order {
		if (cols == nil || slices.Contains(cols, c)) && sc.keyable(c) && (!sqlite || sc.integer(c)) {
			continue
		}
		q.extra = append(q.extra, c)
		if sqlite {
			sel.WriteString(", +" + d.ident(c))
		} else {
			sel.WriteString(", " + d.ident(c))
		}
	}
	from := d.ident(opts.Table)
	if opts.From != "" {
		from = "(" + opts.From + ") AS sluice_query"
	}
	var orderBy strings.Builder
	for i, c := range q.order {
		if i > 0 {
			orderBy.WriteString(", ")
		}
		orderBy.WriteString(d.ident(c))
	}
	cond, keyArgs := d.keyAfter(q.order, len(opts.Args)+1)
	q.keyArgs = keyArgs
	where := func(after bool) string {
		var w []string
		if opts.Where != "" {
			w = append(w, "("+opts.Where+")")
		}
		if after {
			w = append(w, cond)
		}
		if len(w) == 0 {
			return ""
		}
		return " WHERE " + strings.Join(w, " AND ")
	}
	limit := " ORDER BY " + orderBy.String() + " LIMIT " + strconv.Itoa(opts.PageSize)
	q.first = "SELECT " + sel.String() + " FROM " + from + where(false) + limit
	q.next = "SELECT " + sel.String() + " FROM " + from + where(true) + limit
	q.countFirst = "SELECT COUNT(*) FROM " + from + where(false)
	q.countNext = "SELECT COUNT(*) FROM " + from + where(true)
	var counts, anyNull []string
	for _, c := range q.order {
		counts = append(counts, "COUNT(CASE WHEN "+d.ident(c)+" IS NULL THEN 1 END)")
		anyNull = append(anyNull, d.ident(c)+" IS NULL")
	}
	w := " WHERE (" + strings.Join(anyNull, " OR ") + ")"
	if opts.Where != "" {
		w = " WHERE (" + opts.Where + ") AND (" + strings.Join(anyNull, " OR ") + ")"
	}
	q.nulls = "SELECT " + strings.Join(counts, ", ") + " FROM " + from + w
	return q
}
