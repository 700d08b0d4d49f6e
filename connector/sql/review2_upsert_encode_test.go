package sql_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Review2 finding 3: on PostgreSQL (pgx), a value that does not fit the
// column's type (an int of 3,000,000,000 for an INTEGER column) is refused
// by the driver as it encodes the arguments ("unable to encode ... for
// int4"), before the server sees it: no SQLSTATE, and not database/sql's
// "sql: converting argument" text that argumentError knows. Write takes it
// for the statement's error and fails every row of the batch with
// ErrStatement, unsplit: the 9 good rows are lost with the bad one.
// MariaDB answers 1264 (a row's error) and is split; SQLite stores it.
func TestReview2UpsertDriverEncodeErrorIsARowError(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table, BatchSize: 10})
		require.NoError(t, err)
		items := products(10)
		items[4].Qty = 3_000_000_000
		errs := u.Write(t.Context(), items)
		failed := 0
		for i, e := range errs {
			if e != nil {
				failed++
				if failed == 1 {
					t.Logf("row %d: %v", i, e)
				}
			}
		}
		var n int
		require.NoError(t, db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s", table)).Scan(&n))
		assert.LessOrEqual(t, failed, 1, "only the row whose value does not fit fails")
		assert.GreaterOrEqual(t, n, 9, "the 9 good rows are written")
	})
}
