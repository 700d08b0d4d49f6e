package sql_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/resilience"
)

// A statement of a transaction (a batch above one statement) that fails
// without a code, as when the connection drops (io.EOF), is transient,
// not the statement's permanent ErrStatement, nor unknown: the
// transaction did not commit, and no row is in the table.
func TestUpsertCodelessErrorInATransactionIsTransient(t *testing.T) {
	plain := openSQLite(t)
	var seq int
	var name, path string
	require.NoError(t, plain.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
	al := &answerLost{inner: plain.Driver(), dsn: "file:" + filepath.Clean(path) + "?_pragma=busy_timeout(5000)"}
	db := sql.OpenDB(al)
	defer db.Close()
	table := productTable(t, db, sluicesql.SQLite)
	// 3 rows a statement: the batch of 10 is one transaction.
	u, err := sluicesql.NewUpserter[product](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table, MaxParams: 9})
	require.NoError(t, err)
	al.armed.Store(2) // the batch and its retry whole
	errs := u.Write(t.Context(), products(10))
	require.Len(t, errs, 10)
	t.Logf("row 0: %v", errs[0])
	assert.Empty(t, rows(t, db, table), "the transaction did not commit")
	for i, e := range errs {
		assert.True(t, resilience.IsTransient(e), "row %d", i)
		assert.NotErrorIs(t, e, sluicesql.ErrStatement, "row %d", i)
		assert.NotErrorIs(t, e, sluicesql.ErrCommitUnknown, "row %d: not written", i)
	}
	assert.Equal(t, int64(1), u.BatchRetries())
	// Once the connection holds, the rows are written.
	assert.Nil(t, u.Write(t.Context(), products(10)))
	assert.Len(t, rows(t, db, table), 10)
}
