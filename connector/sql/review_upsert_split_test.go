package sql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// countingExecs opens SQLite connections that count the statements
// executed through ExecContext.
type countingExecs struct {
	inner driver.Driver
	dsn   string
	execs atomic.Int64
}

func (c *countingExecs) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

func (c *countingExecs) Driver() driver.Driver { return c.inner }

type countingConn struct {
	driver.Conn
	c *countingExecs
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.c.execs.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// Review finding 3: Write splits on every error the classifier does not
// call transient, not only on a row's (a constraint, bad data). An error
// of the statement itself, that no row causes (a column or table that
// does not exist, a permission, a read-only database), is split down to
// single rows: 2n-1 statements per batch (127 for 64 rows; 999 for the
// default 500), and then every row gets a "RowError" and is dead-lettered
// alone as if it were bad. Isolating one bad row of 64 costs at most
// 2*6+1 = 13 statements; a statement error should cost one.
func TestReviewUpsertStatementErrorIsNotSplit(t *testing.T) {
	plain := openSQLite(t)
	var seq int
	var name, path string
	require.NoError(t, plain.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
	ce := &countingExecs{inner: plain.Driver(), dsn: "file:" + filepath.Clean(path) + "?_pragma=busy_timeout(5000)"}
	db := sql.OpenDB(ce)
	defer db.Close()
	table := tableName(t, db, sluicesql.SQLite)
	// The table lacks the column name that product writes.
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, qty INTEGER NOT NULL)")
	require.NoError(t, err)

	u, err := sluicesql.NewUpserter[product](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table})
	require.NoError(t, err)
	before := ce.execs.Load()
	errs := u.Write(t.Context(), products(64))
	execs := ce.execs.Load() - before
	require.Len(t, errs, 64)
	t.Logf("statements for a batch of 64 that no row can fix: %d; first error: %v", execs, errs[0])
	assert.LessOrEqual(t, execs, int64(13), "a statement error is not split down to every single row")
}
