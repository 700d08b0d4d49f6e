package sql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// changedCount is what RowsAffected adds for inserted rows inserted and
// changed rows changed: MySQL counts a changed row twice.
func changedCount(d sluicesql.Dialect, inserted, changed int64) int64 {
	if d == sluicesql.MySQL {
		return inserted + 2*changed
	}
	return inserted + changed
}

// With SkipUnchanged, RowsAffected counts the rows inserted or changed
// and no row written again as it is, NULL columns included; a changed
// row is updated. Batches of one statement and of several in a
// transaction (MaxParams 6: two rows a statement) count alike.
func TestUpserterCountsRowsInsertedOrChanged(t *testing.T) {
	for _, maxParams := range []int{0, 6} {
		eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
			table := productTable(t, db, d)
			u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table, SkipUnchanged: true, MaxParams: maxParams})
			require.NoError(t, err)
			ctx := t.Context()
			first := []product{{ID: 1, Name: str("añil 藍"), Qty: 1}, {ID: 2, Qty: 2}, {ID: 3, Name: str("c"), Qty: 3}}
			require.Nil(t, u.Write(ctx, first))
			assert.Equal(t, int64(3), u.RowsAffected(), "three inserted")

			require.Nil(t, u.Write(ctx, first))
			assert.Equal(t, int64(3), u.RowsAffected(), "the same rows again, NULL name included, change nothing")

			// Row 1's qty and row 2's NULL name change, row 3 is as it
			// was, row 4 is new.
			second := []product{{ID: 1, Name: str("añil 藍"), Qty: 10}, {ID: 2, Name: str("b"), Qty: 2}, first[2], {ID: 4, Qty: 4}}
			require.Nil(t, u.Write(ctx, second))
			assert.Equal(t, 3+changedCount(d, 1, 2), u.RowsAffected())
			assert.Equal(t, second, rows(t, db, table))

			// A row changed back to NULL is a change too.
			require.Nil(t, u.Write(ctx, []product{{ID: 2, Qty: 2}}))
			assert.Equal(t, 3+changedCount(d, 1, 3), u.RowsAffected())
		})
	}
}

// Without SkipUnchanged, PostgreSQL and SQLite update, and count, every
// row whose key is there; MySQL still counts none that did not change.
func TestUpserterCountsEveryRowUpdated(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table})
		require.NoError(t, err)
		items := products(3)
		require.Nil(t, u.Write(t.Context(), items))
		require.Nil(t, u.Write(t.Context(), items))
		want := int64(6)
		if d == sluicesql.MySQL {
			want = 3
		}
		assert.Equal(t, want, u.RowsAffected())
	})
}

// A batch with a bad row counts the rows its split wrote, not the one
// refused; a batch that fails adds nothing.
func TestUpserterCountsOnlyRowsWritten(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table, SkipUnchanged: true})
		require.NoError(t, err)
		errs := u.Write(t.Context(), products(8, 5))
		require.Len(t, errs, 8)
		require.Error(t, errs[5])
		assert.Equal(t, int64(7), u.RowsAffected())
		assert.Len(t, rows(t, db, table), 7)

		errs = u.Write(t.Context(), products(1, 0))
		require.Error(t, errs[0])
		assert.Equal(t, int64(7), u.RowsAffected())
	})
}

// SkipUnchanged's WHERE names the table as Table does, schema and all.
func TestUpserterSkipsUnchangedInASchemaTable(t *testing.T) {
	schemas := map[sluicesql.Dialect]string{sluicesql.SQLite: "main.", sluicesql.Postgres: "public."}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		if d == sluicesql.MySQL {
			var name string
			require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
			schemas[d] = name + "."
		}
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: schemas[d] + table, SkipUnchanged: true})
		require.NoError(t, err)
		require.Nil(t, u.Write(t.Context(), products(2)))
		require.Nil(t, u.Write(t.Context(), []product{{ID: 1, Name: str("p1"), Qty: 0}, {ID: 2, Name: str("two"), Qty: 1}}))
		assert.Equal(t, changedCount(d, 2, 1), u.RowsAffected())
		assert.Equal(t, []product{{ID: 1, Name: str("p1"), Qty: 0}, {ID: 2, Name: str("two"), Qty: 1}}, rows(t, db, table))
	})
}
