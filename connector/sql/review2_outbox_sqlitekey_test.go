package sql_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Review2 finding 2: the SQLite key check (outbox.go checkSQLiteKey) is
// skipped or fooled for tables whose key SQLite does give again:
//   - a Table named in another case than its CREATE TABLE: SQLite's names
//     are case-insensitive, so the outbox reads and deletes the table, but
//     the check looks it up in sqlite_master with name = ? (case-sensitive),
//     finds nothing and passes ("A table it does not find is left to the
//     first read to report");
//   - a DDL that has the word AUTOINCREMENT anywhere else (a column's
//     DEFAULT, a CHECK, a column name): strings.Contains(upper,
//     "AUTOINCREMENT") passes it.
//
// Either way Open accepts an INTEGER PRIMARY KEY without AUTOINCREMENT,
// and a delete tried again after a lost answer can delete a new row that
// took the freed key before it is emitted (review finding 2 of round 1).
func TestReview2OutboxSQLiteKeyCheckBypassed(t *testing.T) {
	for _, c := range []struct{ ddl, table string }{
		{`CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL)`, "OUTBOX"},
		{`CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL DEFAULT 'no autoincrement here')`, "outbox"},
	} {
		db := openSQLite(t)
		_, err := db.Exec(c.ddl)
		require.NoError(t, err)
		// The table is an outbox the source can read under that name.
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+c.table).Scan(&n))
		err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: c.table}).Open(context.Background())
		assert.ErrorIs(t, err, sluicesql.ErrOutboxOptions, "Table %q of %s: a rowid key without AUTOINCREMENT is refused", c.table, c.ddl)
	}
}
