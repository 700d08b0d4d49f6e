package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver, registered as "pgx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // the SQLite driver, registered as "sqlite"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/checkpoint/checkpointtest"
	"github.com/sluicehq/sluice/checkpoint/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openSQLiteAt opens the database file at path, set up for concurrent
// writers as New's doc asks, and closes it when t ends.
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
	name := "sluice_ckpt_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name)
		assert.NoError(t, err, "drop table %s", name)
	})
	return name
}

func newStore(t *testing.T, db *sql.DB, d sqlstore.Dialect, table string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
	require.NoError(t, err)
	return s
}

// sqliteStore is a Store with the database it is in and the file of that
// database, so that the suite can open the file again.
type sqliteStore struct {
	*sqlstore.Store
	db   *sql.DB
	path string
}

func openSQLiteStore(t *testing.T, path string) sqliteStore {
	db := openSQLiteAt(t, path)
	return sqliteStore{newStore(t, db, sqlstore.SQLite, sqlstore.DefaultTable), db, path}
}

// The SQLite store passes the suite on a database file; reopening closes
// the database and opens the file again, as the next process would.
func TestSQLiteConformance(t *testing.T) {
	t.Parallel()
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		return openSQLiteStore(t, filepath.Join(t.TempDir(), "checkpoints.db"))
	}, checkpointtest.WithReopen(func(t *testing.T, s checkpoint.Store) checkpoint.Store {
		old := s.(sqliteStore)
		require.NoError(t, old.db.Close())
		return openSQLiteStore(t, old.path)
	}))
}

// The PostgreSQL store passes the suite on the test server; reopening
// makes a Store on another connection pool, on the same table.
func TestPostgresConformance(t *testing.T) {
	t.Parallel()
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		db := openPostgres(t)
		return newStore(t, db, sqlstore.Postgres, uniqueTable(t, db))
	}, checkpointtest.WithReopen(func(t *testing.T, s checkpoint.Store) checkpoint.Store {
		return newStore(t, openPostgres(t), sqlstore.Postgres, s.(*sqlstore.Store).Table())
	}))
}

// dialects runs f on a database of each dialect.
func dialects(t *testing.T, f func(t *testing.T, db *sql.DB, d sqlstore.Dialect)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, openSQLiteAt(t, filepath.Join(t.TempDir(), "checkpoints.db")), sqlstore.SQLite)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, openPostgres(t), sqlstore.Postgres)
	})
}

func TestTableIsCreatedOnFirstUse(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		table := uniqueTable(t, db)
		s := newStore(t, db, d, table)
		assert.Equal(t, table, s.Table())
		_, err := db.ExecContext(ctx, "SELECT 1 FROM "+table)
		require.Error(t, err, "New does not touch the database")

		pos, err := s.Load(ctx, "orders", "read")
		require.NoError(t, err)
		assert.Nil(t, pos)
		require.NoError(t, s.Save(ctx, "orders", "read", []byte("offset=7")))
		var (
			pipeline, source string
			stored           []byte
			n                int
		)
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		assert.Equal(t, 1, n)
		require.NoError(t, db.QueryRowContext(ctx, "SELECT pipeline, source, position FROM "+table+
			" WHERE saved_at IS NOT NULL").Scan(&pipeline, &source, &stored))
		assert.Equal(t, []string{"orders", "read", "offset=7"}, []string{pipeline, source, string(stored)},
			"one row, readable with SQL")

		require.NoError(t, s.Save(ctx, "orders", "read", []byte("offset=8")))
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		assert.Equal(t, 1, n, "a Save replaces the row")

		other := newStore(t, db, d, table)
		pos, err = other.Load(ctx, "orders", "read")
		require.NoError(t, err)
		assert.Equal(t, "offset=8", string(pos), "a second store finds the table there")

		_, err = db.ExecContext(ctx, "DELETE FROM "+table+" WHERE pipeline = 'orders' AND source = 'read'")
		require.NoError(t, err)
		pos, err = other.Load(ctx, "orders", "read")
		require.NoError(t, err)
		assert.Nil(t, pos, "deleting the row starts the source over")
	})
}

func TestFailedCreationIsTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openSQLiteAt(t, filepath.Join(t.TempDir(), "checkpoints.db"))
	table := uniqueTable(t, db)
	// A view of the table's name makes the upsert fail until it is dropped.
	_, err := db.ExecContext(ctx, "CREATE VIEW "+table+" AS SELECT 1 AS x")
	require.NoError(t, err)
	s := newStore(t, db, sqlstore.SQLite, table)
	err = s.Save(ctx, "orders", "read", []byte("1"))
	require.Error(t, err)

	_, err = db.ExecContext(ctx, "DROP VIEW "+table)
	require.NoError(t, err)
	s = newStore(t, db, sqlstore.SQLite, table)
	require.NoError(t, s.Save(ctx, "orders", "read", []byte("1")), "the next store created the table")
}

func TestNewRefusesBadArguments(t *testing.T) {
	t.Parallel()
	_, err := sqlstore.New(nil, sqlstore.Dialect{}, sqlstore.WithTable("positions; DROP TABLE x"))
	require.Error(t, err)
	assert.Equal(t, `sqlstore: WithTable("positions; DROP TABLE x"): must be a letter or an underscore, then letters, digits and underscores, 48 at most
sqlstore: db is nil
sqlstore: dialect is not set: use sqlstore.SQLite or sqlstore.Postgres`, err.Error())
	db := openSQLiteAt(t, filepath.Join(t.TempDir(), "checkpoints.db"))
	for _, name := range []string{"", "1table", "a-b", "schema.table", `"quoted"`, "x" + string(make([]byte, 48))} {
		_, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(name))
		assert.Error(t, err, "%q", name)
	}
	for _, name := range []string{"t", "_t", "Positions_2026", "sluice_checkpoints"} {
		_, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(name))
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
		names := []string{"Ckpt_" + hex.EncodeToString(b[:])}
		if d == sqlstore.SQLite {
			names = append(names, "order") // a file of its own: the name is this test's
		}
		for _, name := range names {
			t.Cleanup(func() {
				_, err := db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+name+`"`)
				assert.NoError(t, err)
			})
			s := newStore(t, db, d, name)
			require.NoError(t, s.Save(ctx, "orders", "read", []byte("1")), "table %q", name)
			pos, err := s.Load(ctx, "orders", "read")
			require.NoError(t, err)
			assert.Equal(t, "1", string(pos))
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
// saves: each save must still succeed.
func TestConcurrentFirstUseCreatesTheTableOnce(t *testing.T) {
	t.Parallel()
	for range 3 {
		db := openPostgres(t)
		table := uniqueTable(t, db)
		const n = 8
		errs := make(chan error, n)
		for i := range n {
			go func() {
				s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
				if err == nil {
					err = s.Save(t.Context(), "orders", string(rune('a'+i)), []byte("1"))
				}
				errs <- err
			}()
		}
		for range n {
			require.NoError(t, <-errs)
		}
	}
}

// randomName returns n bytes of base64 text from random bytes, which
// PostgreSQL cannot compress into a shorter key.
func randomName(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.RawStdEncoding.EncodeToString(b)[:n]
}

// Long names: a pair of 2 600 bytes together is kept on both dialects,
// and so is a longer one that compresses (a templated path of 6 018 bytes).
// On PostgreSQL, whose primary key's index holds a row of at most 2 704
// bytes after compression, a longer pair that does not compress fails Save
// with an error that says so and names the pair cut short (before, the
// database's error came with 4 KiB of name), and loads as nil. SQLite
// keeps a pair of any length.
func TestLongNames(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		s := newStore(t, db, d, uniqueTable(t, db))
		for _, n := range []int{1300, 2599} {
			p, src := randomName(t, 2600-n), randomName(t, n)
			require.NoError(t, s.Save(ctx, p, src, []byte("pos")), "%d and %d bytes", len(p), len(src))
			got, err := s.Load(ctx, p, src)
			require.NoError(t, err)
			assert.Equal(t, []byte("pos"), got)
		}
		templated := "s3://bucket/" + strings.Repeat("partition=2026/", 400)
		require.NoError(t, s.Save(ctx, "orders", templated, []byte("t")), "a long pair that compresses")
		got, err := s.Load(ctx, "orders", templated)
		require.NoError(t, err)
		assert.Equal(t, []byte("t"), got)

		p, src := "orders", randomName(t, 4096)
		err = s.Save(ctx, p, src, []byte("pos"))
		got, lerr := s.Load(ctx, p, src)
		require.NoError(t, lerr)
		if d == sqlstore.Postgres {
			require.Error(t, err)
			assert.Contains(t, err.Error(), "names, 4102 bytes together, are too long for a postgres key")
			assert.Less(t, len(err.Error()), 600, "the names are cut short")
			assert.Nil(t, got, "nothing saved")
			return
		}
		require.NoError(t, err)
		assert.Equal(t, []byte("pos"), got)
	})
}
