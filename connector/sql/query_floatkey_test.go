package sql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

type bigintInFloat struct {
	K float64 `db:"k"`
	V int64   `db:"v"`
}

type doubleInFloat32 struct {
	K float32 `db:"k"`
	V int64   `db:"v"`
}

type doubleInFloat64 struct {
	K float64 `db:"k"`
	V int64   `db:"v"`
}

// A key column read into a float field narrower than it (a BIGINT in a
// float64, a double in a float32) rounds the key, and the next page's
// condition would skip the rows that round to the same float: the
// source refuses it, before any row, with a KeyError naming the column.
// A double in a float64 pages whole. SQLite's driver names no column
// type here; it compares the rounded key as the column's own and loses
// nothing: it reads every row.
func TestQueryKeyInNarrowerFloatFieldIsRefused(t *testing.T) {
	double := map[sluicesql.Dialect]string{sluicesql.SQLite: "REAL", sluicesql.Postgres: "DOUBLE PRECISION", sluicesql.MySQL: "DOUBLE"}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		ctx := context.Background()
		t.Run("bigint", func(t *testing.T) {
			big := tableName(t, db, d)
			_, err := db.Exec("CREATE TABLE " + big + " (k BIGINT NOT NULL PRIMARY KEY, v BIGINT NOT NULL)")
			require.NoError(t, err)
			_, err = db.Exec("INSERT INTO " + big + " (k, v) VALUES (9007199254740995,1),(9007199254740996,2),(9007199254741000,3)")
			require.NoError(t, err)
			e := &emitter[bigintInFloat]{}
			err = sluicesql.Query[bigintInFloat](db, d, sluicesql.QueryOptions{Table: big, Key: []string{"k"}, PageSize: 1}).Run(ctx, e)
			if d == sluicesql.SQLite {
				require.NoError(t, err)
				require.Len(t, e.items, 3)
				return
			}
			require.ErrorIs(t, err, sluicesql.ErrKey)
			require.ErrorContains(t, err, `column "k"`)
			require.Empty(t, e.items)
		})
		t.Run("double", func(t *testing.T) {
			dbl := tableName(t, db, d)
			_, err := db.Exec("CREATE TABLE " + dbl + " (k " + double[d] + " NOT NULL PRIMARY KEY, v BIGINT NOT NULL)")
			require.NoError(t, err)
			_, err = db.Exec("INSERT INTO " + dbl + " (k, v) VALUES (0.1,1),(0.1000000001,2),(0.5,3)")
			require.NoError(t, err)
			e32 := &emitter[doubleInFloat32]{}
			err = sluicesql.Query[doubleInFloat32](db, d, sluicesql.QueryOptions{Table: dbl, Key: []string{"k"}, PageSize: 1}).Run(ctx, e32)
			if d == sluicesql.SQLite {
				require.NoError(t, err)
				require.Len(t, e32.items, 3)
			} else {
				require.ErrorIs(t, err, sluicesql.ErrKey)
				require.Empty(t, e32.items)
			}

			e64 := &emitter[doubleInFloat64]{}
			require.NoError(t, sluicesql.Query[doubleInFloat64](db, d, sluicesql.QueryOptions{Table: dbl, Key: []string{"k"}, PageSize: 1}).Run(ctx, e64))
			require.Len(t, e64.items, 3)
		})
	})
}
