package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver, registered as "pgx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // the SQLite driver, registered as "sqlite"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/idempotency/storetest"
	"github.com/sluicehq/sluice/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openSQLite opens a database file of its own in t's temporary directory,
// set up for concurrent writers as New's doc asks.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	return openSQLiteAt(t, filepath.Join(t.TempDir(), "idempotency.db"))
}

// openSQLiteAt opens the database file at path, set up for concurrent
// writers as New's doc asks.
func openSQLiteAt(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// openPostgres connects to the test server, or skips t.
func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", servicetest.Postgres(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// uniqueTable returns a table name no other test uses, and drops the table
// when t ends.
func uniqueTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "sluice_idem_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name)
		assert.NoError(t, err, "drop table %s", name)
	})
	return name
}

func newStore(t *testing.T, db *sql.DB, d sqlstore.Dialect, opts ...sqlstore.Option) *sqlstore.Store {
	t.Helper()
	opts = append([]sqlstore.Option{sqlstore.WithTable(uniqueTable(t, db)), sqlstore.WithRetention(storetest.Retention)}, opts...)
	s, err := sqlstore.New(db, d, opts...)
	require.NoError(t, err)
	return s
}

func TestSQLiteConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		return newStore(t, openSQLite(t), sqlstore.SQLite)
	})
}

func TestPostgresConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		return newStore(t, openPostgres(t), sqlstore.Postgres)
	})
}

// Two handles on one SQLite file, as two processes would have, claim one
// key at once: one of all the owners gets it.
func TestSQLiteTwoHandlesOnOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shared.db")
	var stores []*sqlstore.Store
	for range 2 {
		s, err := sqlstore.New(openSQLiteAt(t, path), sqlstore.SQLite)
		require.NoError(t, err)
		stores = append(stores, s)
	}
	const owners = 16
	for round := range 5 {
		key := fmt.Sprint("key-", round)
		states := make([]idempotency.State, owners)
		errs := make([]error, owners)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range owners {
			wg.Go(func() {
				<-start
				states[i], errs[i] = stores[i%2].Claim(context.Background(), key, fmt.Sprint("owner-", i), epoch, lease)
			})
		}
		close(start)
		wg.Wait()
		claimed := 0
		for i := range owners {
			require.NoError(t, errs[i])
			if states[i] == idempotency.Claimed {
				claimed++
			}
		}
		assert.Equal(t, 1, claimed, "round %d", round)
	}
}

// dialects runs f on a store of each dialect.
func dialects(t *testing.T, f func(t *testing.T, db *sql.DB, d sqlstore.Dialect)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, openSQLite(t), sqlstore.SQLite)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, openPostgres(t), sqlstore.Postgres)
	})
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const lease = 30 * time.Second

func TestTableIsCreatedOnFirstUse(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		table := uniqueTable(t, db)
		s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
		require.NoError(t, err)
		assert.Equal(t, table, s.Table())
		_, err = db.ExecContext(ctx, "SELECT 1 FROM "+table)
		require.Error(t, err, "New does not touch the database")

		st, err := s.Claim(ctx, "k", "a", epoch, lease)
		require.NoError(t, err)
		assert.Equal(t, idempotency.Claimed, st)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		assert.Equal(t, 1, n)

		other, err := sqlstore.New(db, d, sqlstore.WithTable(table))
		require.NoError(t, err)
		st, err = other.Claim(ctx, "k", "b", epoch, lease)
		require.NoError(t, err)
		assert.Equal(t, idempotency.Busy, st, "a second store finds the table there")
	})
}

func TestFailedCreationIsTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openSQLite(t)
	table := uniqueTable(t, db)
	// A view of the table's name makes the creation fail (a view cannot
	// be indexed) until it is dropped.
	_, err := db.ExecContext(ctx, "CREATE VIEW "+table+" AS SELECT 1 AS x")
	require.NoError(t, err)
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(table))
	require.NoError(t, err)

	_, err = s.Claim(ctx, "k", "a", epoch, lease)
	require.ErrorContains(t, err, "sqlstore: create table "+table+": ")

	_, err = db.ExecContext(ctx, "DROP VIEW "+table)
	require.NoError(t, err)
	st, err := s.Claim(ctx, "k", "a", epoch, lease)
	require.NoError(t, err, "the next call created the table")
	assert.Equal(t, idempotency.Claimed, st)
}

func TestPrune(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		s := newStore(t, db, d, sqlstore.WithRetention(time.Hour), sqlstore.WithPruneInterval(0))
		for i := range 3 {
			key := fmt.Sprint("done-", i)
			_, err := s.Claim(ctx, key, "a", epoch, lease)
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, key, "a", epoch.Add(time.Duration(i)*time.Minute)))
		}
		_, err := s.Claim(ctx, "crashed", "x", epoch.Add(30*time.Minute), lease)
		require.NoError(t, err)
		_, err = s.Claim(ctx, "live", "y", epoch.Add(time.Hour), lease)
		require.NoError(t, err)

		prune := func(at time.Duration) int64 {
			n, err := s.Prune(ctx, epoch.Add(at))
			require.NoError(t, err)
			return n
		}
		assert.Equal(t, int64(2), prune(time.Hour+time.Minute), "done-0 and done-1 are past the retention")
		assert.Equal(t, int64(1), prune(time.Hour+2*time.Minute), "done-2")
		assert.Equal(t, int64(0), prune(time.Hour+30*time.Minute), "the crashed claim's lease ended less than a retention ago")
		assert.Equal(t, int64(1), prune(time.Hour+30*time.Minute+lease), "and now a retention ago")
		assertRows(t, db, s.Table(), 1) // live
	})
}

func TestClaimPrunesEveryInterval(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		s := newStore(t, db, d, sqlstore.WithRetention(time.Hour), sqlstore.WithPruneInterval(10*time.Minute))
		completeAt := func(key string, at time.Duration) {
			_, err := s.Claim(ctx, key, "a", epoch.Add(at), lease)
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, key, "a", epoch.Add(at)))
		}
		completeAt("old", 0)
		assertRows(t, db, s.Table(), 1)
		completeAt("old2", 10*time.Minute)
		assertRows(t, db, s.Table(), 2) // the first claim's prune came before either

		completeAt("k1", time.Hour+5*time.Minute)
		assertRows(t, db, s.Table(), 2) // an interval later: old pruned, k1 added
		completeAt("k2", time.Hour+12*time.Minute)
		assertRows(t, db, s.Table(), 3) // less than an interval: old2 kept though past its retention
		completeAt("k3", time.Hour+15*time.Minute)
		assertRows(t, db, s.Table(), 3) // an interval: old2 pruned
	})
}

func assertRows(t *testing.T, db *sql.DB, table string, want int) {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	assert.Equal(t, want, n, "rows in %s", table)
}

func TestNewRefusesBadArguments(t *testing.T) {
	t.Parallel()
	_, err := sqlstore.New(nil, sqlstore.Dialect{},
		sqlstore.WithTable("orders; DROP TABLE x"), sqlstore.WithRetention(0), sqlstore.WithPruneInterval(-time.Second))
	require.Error(t, err)
	assert.Equal(t, `sqlstore: WithTable("orders; DROP TABLE x"): must be a letter or an underscore, then letters, digits and underscores, 48 at most
sqlstore: WithRetention(0s): must be more than 0
sqlstore: WithPruneInterval(-1s): must not be negative
sqlstore: db is nil
sqlstore: dialect is not set: use sqlstore.SQLite or sqlstore.Postgres`, err.Error())

	for _, name := range []string{"", "1table", "a-b", "schema.table", `"quoted"`, "x" + string(make([]byte, 48))} {
		_, err := sqlstore.New(openSQLite(t), sqlstore.SQLite, sqlstore.WithTable(name))
		assert.Error(t, err, "%q", name)
	}
	for _, name := range []string{"t", "_t", "Orders_2026", "sluice_idempotency"} {
		_, err := sqlstore.New(openSQLite(t), sqlstore.SQLite, sqlstore.WithTable(name))
		assert.NoError(t, err, "%q", name)
	}
}

// Upper case and a reserved word are table names as good as any.
func TestTableNamesAreQuoted(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		var b [4]byte
		_, _ = rand.Read(b[:])
		names := []string{"Idem_" + hex.EncodeToString(b[:])}
		if d == sqlstore.SQLite {
			names = append(names, "order") // a file of its own: the name is this test's
		}
		for _, name := range names {
			t.Cleanup(func() {
				_, err := db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+name+`"`)
				assert.NoError(t, err)
			})
			s, err := sqlstore.New(db, d, sqlstore.WithTable(name))
			require.NoError(t, err)
			st, err := s.Claim(ctx, "k", "a", epoch, lease)
			require.NoError(t, err, "table %q", name)
			assert.Equal(t, idempotency.Claimed, st)
			require.NoError(t, s.Complete(ctx, "k", "a", epoch))
			n, err := s.Prune(ctx, epoch)
			require.NoError(t, err)
			assert.Zero(t, n)
		}
	})
}

func TestDialectString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "sqlite", sqlstore.SQLite.String())
	assert.Equal(t, "postgres", sqlstore.Postgres.String())
	assert.Equal(t, "(no dialect)", sqlstore.Dialect{}.String())
}

// Stores of many processes create one table at once on their first
// claims: PostgreSQL's CREATE TABLE IF NOT EXISTS can then fail in all but
// one of them, and each claim must still be answered.
func TestConcurrentFirstUseCreatesTheTableOnce(t *testing.T) {
	t.Parallel()
	for range 5 {
		db := openPostgres(t)
		table := uniqueTable(t, db)
		const n = 8
		errs := make(chan error, n)
		for i := range n {
			go func() {
				s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
				if err == nil {
					_, err = s.Claim(t.Context(), fmt.Sprintf("k%d", i), "owner", time.Unix(1e9, 0), time.Minute)
				}
				errs <- err
			}()
		}
		for range n {
			require.NoError(t, <-errs)
		}
	}
}

// An owner whose clock runs ahead of the others' prunes nothing past the
// database's clock: its prune deleted every completion its own time had
// passed, so a redelivery to an owner with the right clock was claimed,
// and written, again (a review's finding).
func TestAutoPruneOfAClockAheadKeepsOthersCompletions(t *testing.T) {
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		s := newStore(t, db, d, sqlstore.WithRetention(24*time.Hour))
		ctx := context.Background()
		now := time.Now() // the owners with the right clock: the database's
		st, err := s.Claim(ctx, "paid", "a", now, time.Minute)
		require.NoError(t, err)
		require.Equal(t, idempotency.Claimed, st)
		require.NoError(t, s.Complete(ctx, "paid", "a", now.Add(time.Second)))
		// Another owner, its clock two days ahead, claims another key, and
		// its Claim prunes.
		_, err = s.Claim(ctx, "other", "skewed", now.Add(48*time.Hour), time.Minute)
		require.NoError(t, err)
		st, err = s.Claim(ctx, "paid", "b", now.Add(time.Hour), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, idempotency.Completed, st, "completed an hour ago, retention a day")
	})
}

// A Claim whose time is before the last prune's (a clock set back, or
// the last prune was that of a clock ahead) prunes at once: the prune
// time in the future stopped every prune until it came.
func TestAutoPruneGoesOnAfterAClockAhead(t *testing.T) {
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		s := newStore(t, db, d, sqlstore.WithRetention(time.Hour), sqlstore.WithPruneInterval(time.Hour))
		ctx := context.Background()
		_, err := s.Claim(ctx, "bogus", "skewed", epoch.AddDate(10, 0, 0), time.Minute)
		require.NoError(t, err)
		for h := range 48 {
			now := epoch.Add(time.Duration(h) * time.Hour)
			key := fmt.Sprint("k", h)
			_, err := s.Claim(ctx, key, "a", now, time.Minute)
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, key, "a", now))
		}
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM "`+s.Table()+`"`).Scan(&n))
		assert.LessOrEqual(t, n, 4, "48 hourly keys with a retention of an hour, pruned hourly")
	})
}
