package sql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/resilience"
)

// A batch that the database refuses for a reason no row causes (here a
// column the table lacks) costs one statement: every row gets the one
// error, matching ErrStatement, permanent for every classifier, and
// naming the code.
func TestUpsertStatementErrorFailsTheBatchOnce(t *testing.T) {
	plain := openSQLite(t)
	var seq int
	var name, path string
	require.NoError(t, plain.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
	ce := &countingExecs{inner: plain.Driver(), dsn: "file:" + filepath.Clean(path) + "?_pragma=busy_timeout(5000)"}
	db := sql.OpenDB(ce)
	defer db.Close()
	table := tableName(t, db, sluicesql.SQLite)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, qty INTEGER NOT NULL)")
	require.NoError(t, err)

	for _, n := range []int{1, 2, 64} {
		u, err := sluicesql.NewUpserter[product](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table})
		require.NoError(t, err)
		before := ce.execs.Load()
		errs := u.Write(t.Context(), products(n))
		assert.Equal(t, int64(1), ce.execs.Load()-before, "one statement for %d rows", n)
		require.Len(t, errs, n)
		for _, e := range errs {
			assert.ErrorIs(t, e, sluicesql.ErrStatement)
			assert.ErrorIs(t, e, sluicesql.ErrWrite)
			assert.NotErrorIs(t, e, sluicesql.ErrCommitUnknown)
			assert.False(t, resilience.AllTransient().IsTransient(e), "marked permanent")
			var re *sluicesql.RowError
			require.ErrorAs(t, e, &re)
			assert.Equal(t, "1", re.Code, "SQLITE_ERROR")
		}
		assert.Equal(t, int64(0), u.BatchRetries())
	}
}

// pickyQty refuses to be a driver value when it is 13: database/sql's
// conversion error, which one row's value causes.
type pickyQty int

var errThirteen = errors.New("13 is unlucky")

func (q pickyQty) Value() (driver.Value, error) {
	if q == 13 {
		return nil, errThirteen
	}
	return int64(q), nil
}

type pickyProduct struct {
	ID  int64    `db:"id,key"`
	Qty pickyQty `db:"qty"`
}

// A value that database/sql cannot convert (a driver.Valuer that fails)
// is a row's fault: the batch is split, the other rows written, and the
// row fails alone, permanent.
func TestUpsertArgumentErrorIsARowError(t *testing.T) {
	db := openSQLite(t)
	table := tableName(t, db, sluicesql.SQLite)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, qty INTEGER NOT NULL)")
	require.NoError(t, err)
	u, err := sluicesql.NewUpserter[pickyProduct](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table})
	require.NoError(t, err)
	var items []pickyProduct
	for i := range 20 {
		items = append(items, pickyProduct{ID: int64(i + 1), Qty: pickyQty(i)})
	}
	errs := u.Write(t.Context(), items)
	require.Len(t, errs, 20)
	for i, e := range errs {
		if i != 13 {
			assert.NoError(t, e, "row %d", i)
			continue
		}
		assert.ErrorIs(t, e, errThirteen)
		assert.NotErrorIs(t, e, sluicesql.ErrStatement)
		assert.False(t, resilience.AllTransient().IsTransient(e))
	}
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
	assert.Equal(t, 19, n)
}

// cancelAtCommit opens SQLite connections whose COMMIT, after writing,
// cancels the Write's context and reports errLost: a COMMIT that the
// context ended while the database may have written it.
type cancelAtCommit struct {
	inner  driver.Driver
	dsn    string
	cancel context.CancelFunc
}

func (c *cancelAtCommit) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &cancelConn{Conn: conn, c: c}, nil
}

func (c *cancelAtCommit) Driver() driver.Driver { return c.inner }

type cancelConn struct {
	driver.Conn
	c *cancelAtCommit
}

func (c *cancelConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &cancelTx{Tx: tx, c: c.c}, nil
}

type cancelTx struct {
	driver.Tx
	c *cancelAtCommit
}

func (t *cancelTx) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	t.c.cancel()
	return errLost
}

// A COMMIT that the context ended is unknown, not failed: every row's
// error matches ErrCommitUnknown and the context's cause, and the rows,
// written here, are not retried by Write.
func TestUpsertCommitEndedByContextIsUnknown(t *testing.T) {
	plain := openSQLite(t)
	var seq int
	var name, path string
	require.NoError(t, plain.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("the run stops")
	cc := &cancelAtCommit{inner: plain.Driver(), dsn: "file:" + filepath.Clean(path) + "?_pragma=busy_timeout(5000)", cancel: func() { cancel(stop) }}
	db := sql.OpenDB(cc)
	defer db.Close()
	table := productTable(t, db, sluicesql.SQLite)
	// 3 rows a statement: the batch of 10 is one transaction.
	u, err := sluicesql.NewUpserter[product](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table, MaxParams: 9})
	require.NoError(t, err)
	items := products(10)
	errs := u.Write(ctx, items)
	require.Len(t, errs, 10)
	for _, e := range errs {
		assert.ErrorIs(t, e, sluicesql.ErrCommitUnknown)
		assert.ErrorIs(t, e, stop)
	}
	assert.Equal(t, int64(0), u.BatchRetries(), "no second try once ctx is done")
	assert.Equal(t, items, rows(t, db, table), "the COMMIT had written them")
}
