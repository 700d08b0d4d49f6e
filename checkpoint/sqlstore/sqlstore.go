// Package sqlstore is a [checkpoint.Store] in one table of a SQL database,
// through [database/sql]: SQLite (with modernc.org/sqlite, say) beside a
// pipeline's own SQLite data, PostgreSQL (with
// github.com/jackc/pgx/v5/stdlib, say) for pipelines that move from one
// machine to another, or that should keep their positions in the database
// they write to. The program opens the database with the driver of its
// choice and hands the *sql.DB to [New].
//
// The table holds one row per pipeline and source: the position, and when
// it was saved (the database's CURRENT_TIMESTAMP). It is created on first
// use. A Save is one statement, an INSERT ... ON CONFLICT DO UPDATE, so a
// position is replaced whole or not at all; once it returned nil, the
// database committed it. Whether a commit survives a power cut as well as
// a crash of the process is the database's setting (SQLite's synchronous
// pragma, PostgreSQL's synchronous_commit); the defaults of both keep it.
//
// To start a source over from its beginning, delete its row.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/sluicehq/sluice/checkpoint"
)

// A Dialect is the SQL of one database: [SQLite] or [Postgres].
type Dialect struct {
	name string
	// blob and timestamp are the column types of the position and of
	// the time of its save.
	blob, timestamp string
	// tableOptions ends the CREATE TABLE statement.
	tableOptions string
	// lock, when not empty, is run in the transaction that creates the
	// table, with the table's name as its argument, so that processes
	// creating it at once take turns.
	lock string
	// exists, when not empty, tells with the quoted table name as its
	// argument whether the table is there, so that a role without the
	// right to create tables can use one an administrator made. It looks
	// in the schema where CREATE TABLE would make it (PostgreSQL's
	// current_schema, the first of the search_path that exists), never
	// further along the path: a table of the same name in public may be
	// another job's.
	exists string
}

var (
	// SQLite is the dialect of SQLite 3.24 or later (for ON CONFLICT DO
	// UPDATE). The table is a WITHOUT ROWID table, stored in the order of
	// its key.
	SQLite = Dialect{name: "sqlite", blob: "BLOB", timestamp: "TEXT", tableOptions: " WITHOUT ROWID"}
	// Postgres is the dialect of PostgreSQL 9.5 or later.
	Postgres = Dialect{name: "postgres", blob: "BYTEA", timestamp: "TIMESTAMPTZ",
		lock:   "SELECT pg_advisory_xact_lock(hashtext($1))",
		exists: "SELECT to_regclass(quote_ident(current_schema()) || '.' || $1) IS NOT NULL"}
)

// String returns the dialect's name: "sqlite" or "postgres".
func (d Dialect) String() string {
	if d.name == "" {
		return "(no dialect)"
	}
	return d.name
}

// DefaultTable is the table a [Store] uses unless [WithTable] says
// otherwise.
const DefaultTable = "sluice_checkpoints"

// A Store keeps positions in one table. It is safe for concurrent use,
// and several Stores, in several processes, may share one table; but as
// with any checkpoint store, one run at a time should own a pipeline's
// positions (two runs of one pipeline would each replace the other's).
// Make one with [New]; the zero Store is not usable.
type Store struct {
	db      *sql.DB
	dialect Dialect
	table   string

	loadSQL, saveSQL string

	// created is set once the table exists; creating is a one-slot
	// semaphore, held while the table is created.
	created  atomic.Bool
	creating chan struct{}
}

// An Option configures a [Store].
type Option func(*config)

type config struct {
	table    string
	problems []error
}

// WithTable sets the table's name (default [DefaultTable]): a letter or an
// underscore, then letters, digits and underscores, 48 at most. It is
// quoted in the SQL, so it is used as written, upper case included (in
// PostgreSQL, "Positions" is then another table than positions); to put
// the table in a PostgreSQL schema, set the connection's search_path.
func WithTable(name string) Option {
	return func(c *config) {
		if !identifier.MatchString(name) {
			c.problems = append(c.problems, fmt.Errorf(
				"sqlstore: WithTable(%q): must be a letter or an underscore, then letters, digits and underscores, 48 at most", name))
			return
		}
		c.table = name
	}
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// New returns a Store in db, which speaks dialect. It does not touch the
// database: the table is created by the first call that needs it, and a
// call whose creation failed leaves it to the next call to try again. New
// returns an error naming every problem when db is nil, dialect is the
// zero Dialect, or an option is invalid.
//
// Under concurrent use a SQLite database must wait for its lock instead of
// failing at once: open it with a busy timeout, as with modernc.org/sqlite
// "file:path?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)".
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Store, error) {
	cfg := config{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	problems := cfg.problems
	if db == nil {
		problems = append(problems, errors.New("sqlstore: db is nil"))
	}
	if dialect.name == "" {
		problems = append(problems, errors.New("sqlstore: dialect is not set: use sqlstore.SQLite or sqlstore.Postgres"))
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	s := &Store{db: db, dialect: dialect, table: cfg.table, creating: make(chan struct{}, 1)}
	t := quote(s.table)
	s.loadSQL = `SELECT position FROM ` + t + ` WHERE pipeline = $1 AND source = $2`
	s.saveSQL = `INSERT INTO ` + t + ` AS t (pipeline, source, position, saved_at)
VALUES ($1, $2, $3, CURRENT_TIMESTAMP)
ON CONFLICT (pipeline, source) DO UPDATE SET position = excluded.position, saved_at = excluded.saved_at`
	return s, nil
}

// schema returns the statement that creates the table.
func (s *Store) schema() string {
	return `CREATE TABLE IF NOT EXISTS ` + quote(s.table) + ` (
	pipeline TEXT NOT NULL,
	source   TEXT NOT NULL,
	position ` + s.dialect.blob + ` NOT NULL,
	saved_at ` + s.dialect.timestamp + ` NOT NULL, -- the database's CURRENT_TIMESTAMP at the save
	PRIMARY KEY (pipeline, source)
)` + s.dialect.tableOptions
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Load implements [checkpoint.Store.Load]. A pair whose names Save
// refuses loads as nil.
func (s *Store) Load(ctx context.Context, pipeline, source string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if checkNames(pipeline, source) != nil {
		return nil, nil // never saved
	}
	if err := s.ensureTable(ctx); err != nil {
		return nil, err
	}
	var pos []byte
	err := s.db.QueryRowContext(ctx, s.loadSQL, pipeline, source).Scan(&pos)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("sqlstore: load %s %s: %w", short(pipeline), short(source), err)
	case pos == nil:
		return []byte{}, nil // an empty position, which a driver may scan as nil
	}
	return pos, nil
}

// Save implements [checkpoint.Store.Save]. Names that are not UTF-8 or
// hold a NUL byte are refused, as PostgreSQL's text refuses them. On
// PostgreSQL a pair of names too long for its primary key's index (an
// index row holds 2 704 bytes, after compression: names of about 2 600
// bytes together that do not compress) fails with an error that says so.
func (s *Store) Save(ctx context.Context, pipeline, source string, pos []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkNames(pipeline, source); err != nil {
		return err
	}
	if err := s.ensureTable(ctx); err != nil {
		return err
	}
	if pos == nil {
		pos = []byte{} // a NULL would break NOT NULL
	}
	if _, err := s.db.ExecContext(ctx, s.saveSQL, pipeline, source, pos); err != nil {
		if tooLong(err) {
			return fmt.Errorf("sqlstore: save %s %s: the pipeline's and the source's names, %d bytes together, are too long for a %s key: %w",
				short(pipeline), short(source), len(pipeline)+len(source), s.dialect.name, err)
		}
		return fmt.Errorf("sqlstore: save %s %s: %w", short(pipeline), short(source), err)
	}
	return nil
}

// tooLong reports whether err is PostgreSQL's "program limit exceeded"
// (SQLSTATE 54000): an index row too large, here the primary key's. The
// drivers' errors tell their SQLSTATE by an SQLState method (pgx's
// *pgconn.PgError) or in their text.
func tooLong(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState() == "54000"
	}
	return strings.Contains(err.Error(), "SQLSTATE 54000")
}

// checkNames refuses the names a table could not keep as they are.
// short quotes name, cut to its first 40 characters and "…".
func short(name string) string {
	if utf8.RuneCountInString(name) <= 40 {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%.40q…", name)
}

func checkNames(pipeline, source string) error {
	for _, n := range [...]struct{ what, name string }{{"pipeline", pipeline}, {"source", source}} {
		if !utf8.ValidString(n.name) {
			return fmt.Errorf("sqlstore: the %s name %q is not UTF-8 text", n.what, n.name)
		}
		if strings.IndexByte(n.name, 0) >= 0 {
			return fmt.Errorf("sqlstore: the %s name %q holds a NUL byte", n.what, n.name)
		}
	}
	return nil
}

// ensureTable creates the table unless it exists. A failure is returned
// and not remembered, so that the next call tries again.
func (s *Store) ensureTable(ctx context.Context) error {
	if s.created.Load() {
		return nil
	}
	select {
	case s.creating <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.creating }()
	if s.created.Load() {
		return nil
	}
	var err error
	for range 5 {
		// SQLite refuses a writer at once (SQLITE_BUSY, not waiting its
		// busy timeout) when two handles of a new file both upgrade a
		// read lock to write: one of them tries again.
		if err = s.create(ctx); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("sqlstore: create table %s: %w", s.table, err)
	}
	s.created.Store(true)
	return nil
}

// create runs the schema in one transaction. PostgreSQL's CREATE TABLE IF
// NOT EXISTS fails on a unique index of its catalogue when another process
// creates the same table at the same moment, so there the transaction
// first takes an advisory lock named by the table.
func (s *Store) create(ctx context.Context) error {
	if s.dialect.exists != "" {
		var there bool
		if err := s.db.QueryRowContext(ctx, s.dialect.exists, quote(s.table)).Scan(&there); err == nil && there {
			return nil
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if s.dialect.lock != "" {
		if _, err := tx.ExecContext(ctx, s.dialect.lock, s.table); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, s.schema()); err != nil {
		return err
	}
	return tx.Commit()
}

// quote quotes an identifier that [WithTable] checked, so that a reserved
// word (a table named "order") is a name too.
func quote(name string) string { return `"` + name + `"` }

var _ checkpoint.Store = (*Store)(nil)
