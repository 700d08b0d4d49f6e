package sql_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers "sqlite"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// A database is one of the three this machine runs, as a test opens it.
type database struct {
	name    string
	dialect sluicesql.Dialect
	open    func(t *testing.T) *sql.DB
}

// databases are SQLite (a file in the test's directory), PostgreSQL and
// MariaDB; the last two skip, or fail in CI, when their server is missing.
var databases = []database{
	{"sqlite", sluicesql.SQLite, openSQLite},
	{"postgres", sluicesql.Postgres, openPostgres},
	{"mariadb", sluicesql.MySQL, openMariaDB},
}

// eachDatabase runs f as a subtest on every database.
func eachDatabase(t *testing.T, f func(t *testing.T, db *sql.DB, d sluicesql.Dialect)) {
	t.Helper()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) { f(t, d.open(t), d.dialect) })
	}
}

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", servicetest.Postgres(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, db.Ping())
	return db
}

// mariaDBDSN is the data source name of the tests' MariaDB server, with
// parseTime=true.
func mariaDBDSN(t *testing.T) string {
	t.Helper()
	dsn := servicetest.MariaDB(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "parseTime=true"
}

func openMariaDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mariaDBDSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, db.Ping())
	return db
}

// tableName is a table of the test's own, dropped when it ends: the
// servers' databases are shared by every test.
func tableName(t *testing.T, db *sql.DB, d sluicesql.Dialect) string {
	t.Helper()
	name := "t_" + strings.NewReplacer("/", "_", "-", "_", " ", "_", "#", "_").Replace(strings.ToLower(t.Name()))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	_, err := db.Exec("DROP TABLE IF EXISTS " + name)
	require.NoError(t, err)
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// TestDatabasesOpen shows each database answers, so that a missing one is
// seen once by name.
func TestDatabasesOpen(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id INTEGER PRIMARY KEY)")
		require.NoError(t, err)
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
		require.Equal(t, 0, n)
		require.NotEmpty(t, d.String())
	})
}
