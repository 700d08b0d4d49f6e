package sql_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 5: go-sql-driver/mysql gives a FLOAT column as a float32, which
// a position does not hold: a map item keyed on a FLOAT column fails the
// run on MariaDB ("the driver gave a float32"), though the package's doc
// says positions hold floats. The ScanError also names the failing row as
// "row after (k=-2.5)" when -2.5 is its own key (encode's pg.last includes
// the row being encoded).
func TestQueryFloatKeyOfMapItem(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		typ := map[sluicesql.Dialect]string{sluicesql.SQLite: "REAL", sluicesql.Postgres: "REAL", sluicesql.MySQL: "FLOAT"}[d]
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (k " + typ + " PRIMARY KEY, v INT NOT NULL)")
		require.NoError(t, err)
		for i, k := range []string{"-2.5", "-0.1", "0.1", "0.2", "1.7"} {
			_, err := db.Exec(fmt.Sprintf("INSERT INTO %s (k, v) VALUES (%s, %d)", table, k, i))
			require.NoError(t, err)
		}
		got := readAll(t, sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}, PageSize: 2}))
		assert.Len(t, got, 5)
	})
}
