package sql_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

type review2Colour struct {
	ID     int64  `db:"id,key"`
	Colour string `db:"colour"`
}

// Review2 finding 1: a value an ENUM column does not list is one row's
// bad data, but MariaDB/MySQL (strict mode) report it as error 1265 "Data
// truncated for column ... at row N" with SQLSTATE 01000, which
// inspectMySQL does not count as a row's error (not in mysqlPermanent,
// state neither 22 nor 23). Write then gives every row of the batch the
// one permanent ErrStatement error without a split: 9 good rows of 10
// are failed (dead-lettered) with the bad one. PostgreSQL's enum (22P02)
// and SQLite's CHECK are split and isolate the row.
func TestReview2UpsertEnumValueIsARowError(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		var ddl string
		switch d {
		case sluicesql.MySQL:
			ddl = "CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, colour ENUM('red','green') NOT NULL)"
		case sluicesql.Postgres:
			typ := table + "_colour"
			_, _ = db.Exec("DROP TYPE IF EXISTS " + typ)
			_, err := db.Exec("CREATE TYPE " + typ + " AS ENUM ('red','green')")
			require.NoError(t, err)
			t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table); db.Exec("DROP TYPE IF EXISTS " + typ) })
			ddl = "CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, colour " + typ + " NOT NULL)"
		default:
			ddl = "CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, colour TEXT NOT NULL CHECK (colour IN ('red','green')))"
		}
		_, err := db.Exec(ddl)
		require.NoError(t, err)
		if d == sluicesql.MySQL {
			var mode string
			require.NoError(t, db.QueryRow("SELECT @@SESSION.sql_mode").Scan(&mode))
			t.Logf("sql_mode: %s", mode)
		}
		u, err := sluicesql.NewUpserter[review2Colour](db, d, sluicesql.UpsertOptions{Table: table, BatchSize: 10})
		require.NoError(t, err)
		items := make([]review2Colour, 10)
		for i := range items {
			items[i] = review2Colour{ID: int64(i + 1), Colour: "red"}
		}
		items[4].Colour = "blue"
		errs := u.Write(t.Context(), items)
		require.Len(t, errs, 10)
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
		assert.Equal(t, 1, failed, "only the row with the unlisted value fails")
		assert.Equal(t, 9, n, "the 9 good rows are written")
		assert.NotNil(t, errs[4])
	})
}
