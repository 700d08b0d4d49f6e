package sql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

type decimalKeyFloat struct {
	K float64 `db:"k"`
	V int64   `db:"v"`
}

type decimalKeyString struct {
	K string `db:"k"`
	V int64  `db:"v"`
}

// A DECIMAL key column read into a float64 field: the float rounds the
// key, and the next page's condition, k > the rounded value, skips the
// rows that round to the same float (MariaDB read 2 rows of 4 without an
// error). The source refuses it with a KeyError before it emits a row;
// read into a string field, the same table reads whole. (SQLite stores a
// DECIMAL as a REAL: not tested there.)
func TestQueryDecimalKeyInFloatFieldIsRefused(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		if d == sluicesql.SQLite {
			t.Skip("SQLite stores a DECIMAL as a REAL")
		}
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (k DECIMAL(30,20) NOT NULL PRIMARY KEY, v BIGINT NOT NULL)")
		require.NoError(t, err)
		_, err = db.Exec("INSERT INTO " + table + " (k, v) VALUES (1.00000000000000000001,1),(1.00000000000000000002,2),(1.00000000000000000003,3),(2,4)")
		require.NoError(t, err)

		src := sluicesql.Query[decimalKeyFloat](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}, PageSize: 1})
		e := &emitter[decimalKeyFloat]{}
		err = src.Run(context.Background(), e)
		require.ErrorIs(t, err, sluicesql.ErrKey, "read %v", e.items)
		require.Contains(t, err.Error(), table)
		require.Contains(t, err.Error(), `column "k"`)
		require.Contains(t, err.Error(), "float field")
		require.Empty(t, e.items, "no row is emitted before the error")

		strs := sluicesql.Query[decimalKeyString](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}, PageSize: 1})
		es := &emitter[decimalKeyString]{}
		require.NoError(t, strs.Run(context.Background(), es))
		require.Len(t, es.items, 4, "read %v", es.items)
	})
}
