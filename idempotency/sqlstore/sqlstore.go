// Package sqlstore is an [idempotency.Store] in one table of a SQL
// database, through [database/sql]: SQLite (with modernc.org/sqlite, say)
// for one machine, PostgreSQL (with github.com/jackc/pgx/v5/stdlib, say)
// for consumers on many machines. The program opens the database with the
// driver of its choice and hands the *sql.DB to [New].
//
// The table is created on first use. Each claim is one atomic statement
// (an INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING), so that of
// owners claiming one key at once, in any number of processes, exactly one
// gets it. A row holds the SHA-256 of the key, not the key, so that keys of
// any length and any bytes fit an index; times are Unix nanoseconds, taken
// from the caller.
//
// Every error of Claim, Complete and Release, but
// [idempotency.ErrLostClaim], is marked with [resilience.MarkBlameless]:
// no key makes a statement fail, so a failure is the database's
// (unreachable, locked, refusing the table), not the item's, and a good
// item is not dead-lettered, nor counted against a broker's delivery
// limit, while the database is away.
package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// A Dialect is the SQL that a [Store] speaks to one database system: use
// [SQLite] or [Postgres]. The zero Dialect is none, and [New] refuses it.
type Dialect struct {
	name string
	// tableOptions follow the column list of CREATE TABLE.
	tableOptions string
	// lock, when not empty, is run first in the transaction that creates
	// the table, with the table's name as its argument, so that processes
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
	// nowNanos is the database's own clock, in Unix nanoseconds: the
	// bound of an automatic prune (see autoPrune).
	nowNanos string
}

var (
	// SQLite is the dialect of SQLite 3.35 or later (for RETURNING). The
	// table is a WITHOUT ROWID table, stored in the order of its key.
	SQLite = Dialect{name: "sqlite", tableOptions: " WITHOUT ROWID",
		nowNanos: "CAST((julianday('now') - 2440587.5) * 86400000000000 AS INTEGER)"}
	// Postgres is the dialect of PostgreSQL 9.5 or later.
	Postgres = Dialect{name: "postgres", lock: "SELECT pg_advisory_xact_lock(hashtext($1))",
		exists:   "SELECT to_regclass(quote_ident(current_schema()) || '.' || $1) IS NOT NULL",
		nowNanos: "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000000 AS BIGINT)"}
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
const DefaultTable = "sluice_idempotency"

// DefaultPruneInterval is how often, in the time passed to Claim, a Store
// deletes the rows it no longer needs, unless [WithPruneInterval] says
// otherwise.
const DefaultPruneInterval = time.Hour

// The states of a row.
const (
	stateClaimed   = 1
	stateCompleted = 2
)

// claimAttempts bounds the rounds of Claim when the row it found taken is
// gone by the time it reads it (released in between).
const claimAttempts = 3

// A Store keeps claims and completed keys in one table. It is safe for
// concurrent use, and several Stores, in several processes, may share one
// table: that is what makes it fit consumers on several machines. Make
// one with [New]; the zero Store is not usable.
type Store struct {
	db            *sql.DB
	dialect       Dialect
	table         string
	retention     time.Duration
	pruneInterval time.Duration

	claimSQL, stateSQL, completeSQL, ownerSQL, releaseSQL, pruneSQL, autoPruneSQL string

	// created is set once the table exists; creating is a one-slot
	// semaphore, held while the table is created.
	created   atomic.Bool
	creating  chan struct{}
	lastPrune atomic.Int64 // the Unix nanoseconds of the last automatic prune
}

// An Option configures a [Store].
type Option func(*config)

type config struct {
	table         string
	retention     time.Duration
	pruneInterval time.Duration
	problems      []error
}

// WithTable sets the table's name (default [DefaultTable]): a letter or an
// underscore, then letters, digits and underscores, 48 at most. It is
// quoted in the SQL, so it is used as written, upper case included (in
// PostgreSQL, "Orders" is then another table than orders); to put the
// table in a PostgreSQL schema, set the connection's search_path.
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

// WithRetention sets how long a completed key is kept (default
// [idempotency.DefaultRetention]); after that a duplicate of it is written
// again. The retention is recorded in each row when the key completes:
// of stores sharing the table, the completing store's counts. It must be
// more than 0.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.problems = append(c.problems, fmt.Errorf("sqlstore: WithRetention(%v): must be more than 0", d))
			return
		}
		c.retention = d
	}
}

// WithPruneInterval sets how often Claim first deletes the rows past their
// retention, measured in the time passed to Claim (default
// [DefaultPruneInterval]); 0 turns the automatic pruning off, for a
// program that calls [Store.Prune] itself. It must not be negative.
func WithPruneInterval(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.problems = append(c.problems, fmt.Errorf("sqlstore: WithPruneInterval(%v): must not be negative", d))
			return
		}
		c.pruneInterval = d
	}
}

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
	cfg := config{table: DefaultTable, retention: idempotency.DefaultRetention, pruneInterval: DefaultPruneInterval}
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
	s := &Store{
		db: db, dialect: dialect, table: cfg.table,
		retention: cfg.retention, pruneInterval: cfg.pruneInterval,
		creating: make(chan struct{}, 1),
	}
	s.prepareSQL()
	return s, nil
}

func (s *Store) prepareSQL() {
	t := quote(s.table)
	// $1 key_hash, $2 owner, $3 lease_until, $4 expires_at, $5 now. A
	// row is taken over when it is a claim whose lease ended or that the
	// same owner holds, or a completion past its retention.
	s.claimSQL = `INSERT INTO ` + t + ` AS t (key_hash, owner, state, lease_until, completed_at, expires_at)
VALUES ($1, $2, 1, $3, 0, $4)
ON CONFLICT (key_hash) DO UPDATE SET
	owner = excluded.owner, state = 1, lease_until = excluded.lease_until,
	completed_at = 0, expires_at = excluded.expires_at
WHERE (t.state = 1 AND (t.lease_until <= $5 OR t.owner = excluded.owner))
	OR (t.state = 2 AND t.expires_at <= $5)
RETURNING state`
	s.stateSQL = `SELECT state FROM ` + t + ` WHERE key_hash = $1`
	// $1 key_hash, $2 owner, $3 completed_at, $4 expires_at.
	s.completeSQL = `UPDATE ` + t + ` SET state = 2, lease_until = 0, completed_at = $3, expires_at = $4
WHERE key_hash = $1 AND owner = $2 AND state = 1`
	s.ownerSQL = `SELECT state, owner FROM ` + t + ` WHERE key_hash = $1`
	s.releaseSQL = `DELETE FROM ` + t + ` WHERE key_hash = $1 AND owner = $2 AND state = 1`
	s.pruneSQL = `DELETE FROM ` + t + ` WHERE expires_at <= $1`
	// An automatic prune deletes nothing past the database's clock
	// either: the now of one caller whose clock is ahead would delete
	// completions that every other owner still holds within their
	// retention, and their duplicates would be written again.
	s.autoPruneSQL = s.pruneSQL + ` AND expires_at <= ` + s.dialect.nowNanos
}

// schema returns the statements that create the table and its index.
func (s *Store) schema() []string {
	t := quote(s.table)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
	key_hash     TEXT     NOT NULL PRIMARY KEY, -- hex SHA-256 of the key
	owner        TEXT     NOT NULL,
	state        SMALLINT NOT NULL,             -- 1 claimed, 2 completed
	lease_until  BIGINT   NOT NULL,             -- Unix ns: when a claim's lease ends; 0 once completed
	completed_at BIGINT   NOT NULL,             -- Unix ns: when completed; 0 while claimed
	expires_at   BIGINT   NOT NULL              -- Unix ns: when the row is no longer needed
)` + s.dialect.tableOptions,
		`CREATE INDEX IF NOT EXISTS ` + quote(s.table+"_expires_at") + ` ON ` + t + ` (expires_at)`,
	}
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Claim implements [idempotency.Store.Claim]. When automatic pruning is on
// and its interval passed since the last prune, it first deletes the rows
// past their retention; an error of that prune is ignored (the next
// interval tries again), not returned.
func (s *Store) Claim(ctx context.Context, key, owner string, now time.Time, lease time.Duration) (_ idempotency.State, err error) {
	defer func() { err = blameless(err) }()
	if err := ctx.Err(); err != nil {
		return 0, err // a done ctx changes nothing, the prune's clock included
	}
	if err := s.ensureTable(ctx); err != nil {
		return 0, err
	}
	s.autoPrune(ctx, now)
	h := hashKey(key)
	// Saturated: a lease ending past 2262 (WithLease(math.MaxInt64))
	// would wrap around to a time long gone, and read as ended.
	until := addSat(now.UnixNano(), int64(lease))
	for range claimAttempts {
		var state int
		err := s.db.QueryRowContext(ctx, s.claimSQL, h, owner, until, addSat(until, int64(s.retention)), now.UnixNano()).Scan(&state)
		if err == nil {
			return idempotency.Claimed, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("sqlstore: claim: %w", err)
		}
		// The row is another owner's live claim, or a completion: which?
		err = s.db.QueryRowContext(ctx, s.stateSQL, h).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue // released in between: claim again
		case err != nil:
			return 0, fmt.Errorf("sqlstore: claim: %w", err)
		case state == stateCompleted:
			return idempotency.Completed, nil
		default:
			return idempotency.Busy, nil
		}
	}
	// The key was claimed and released under this call's feet each time:
	// someone is at work on it.
	return idempotency.Busy, nil
}

// Complete implements [idempotency.Store.Complete].
func (s *Store) Complete(ctx context.Context, key, owner string, now time.Time) (err error) {
	defer func() { err = blameless(err) }()
	if err := s.ensureTable(ctx); err != nil {
		return err
	}
	h := hashKey(key)
	done := now.UnixNano()
	res, err := s.db.ExecContext(ctx, s.completeSQL, h, owner, done, addSat(done, int64(s.retention)))
	if err != nil {
		return fmt.Errorf("sqlstore: complete: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlstore: complete: %w", err)
	} else if n == 1 {
		return nil
	}
	// Not a claim of owner's: completed by owner already, or lost.
	var state int
	var holder string
	err = s.db.QueryRowContext(ctx, s.ownerSQL, h).Scan(&state, &holder)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idempotency.ErrLostClaim
	case err != nil:
		return fmt.Errorf("sqlstore: complete: %w", err)
	case state == stateCompleted && holder == owner:
		return nil
	}
	return idempotency.ErrLostClaim
}

// Release implements [idempotency.Store.Release].
func (s *Store) Release(ctx context.Context, key, owner string) (err error) {
	defer func() { err = blameless(err) }()
	if err := s.ensureTable(ctx); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, s.releaseSQL, hashKey(key), owner); err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	return nil
}

// Prune deletes the rows no longer needed at now: completed keys past
// their retention, and claims whose lease ended more than a retention
// ago. It returns how many it deleted. Claim calls it on its own every
// prune interval; a program that turned that off calls it from a job of
// its own.
func (s *Store) Prune(ctx context.Context, now time.Time) (int64, error) {
	if err := s.ensureTable(ctx); err != nil {
		return 0, err
	}
	return s.prune(ctx, s.pruneSQL, now)
}

// prune runs query, a prune at now.
func (s *Store) prune(ctx context.Context, query string, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, query, now.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune: %w", err)
	}
	return n, nil
}

// autoPrune prunes when the prune interval passed since the last prune,
// or now is before it (a clock set back, or a caller whose clock was
// ahead pruned last: a prune time in the future must not stop pruning
// until that time comes); of callers that find so at once, one prunes.
// It prunes at now, but nothing past the database's clock.
func (s *Store) autoPrune(ctx context.Context, now time.Time) {
	if s.pruneInterval == 0 {
		return
	}
	last, at := s.lastPrune.Load(), now.UnixNano()
	if last != 0 && at >= last && at-last < int64(s.pruneInterval) {
		return
	}
	if s.lastPrune.CompareAndSwap(last, at) {
		// A failure is tried again at the next interval, whatever its
		// cause: a prune that outlasts each Claim's deadline, tried again
		// at every Claim, would fail them all (a second review's finding).
		_, _ = s.prune(ctx, s.autoPruneSQL, now)
	}
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
	for _, stmt := range s.schema() {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// blameless marks err as not the item's fault ([resilience.MarkBlameless]):
// a row holds the hash of the key, so no key makes a statement fail, and
// an error here is the database's (unreachable, locked, refused), not the
// item's. A good item is then not dead-lettered, nor counted against a
// broker's delivery limit, while the database is away. ErrLostClaim, an
// answer rather than a failure, is returned as it is.
func blameless(err error) error {
	if err == nil || errors.Is(err, idempotency.ErrLostClaim) {
		return err
	}
	return resilience.MarkBlameless(err)
}

// addSat is a+b, saturating instead of wrapping around: a "keep
// forever" retention (math.MaxInt64) expires never, and a negative lease
// (given to a Store directly) ends before now, not in 2262.
func addSat(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// quote quotes an identifier that [WithTable] checked, so that a reserved
// word (a table named "order") is a name too.
func quote(name string) string { return `"` + name + `"` }

// hashKey returns the hex SHA-256 of key: what a row holds instead of it.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

var _ idempotency.Store = (*Store)(nil)
