package sql_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 1: a struct field of type sql.RawBytes is scanned by
// database/sql as a slice of the driver's own buffer, valid only until the
// next row; Query reads a whole page before it emits any item, so every
// item of the page holds bytes that later rows overwrote. The source
// neither refuses the type nor copies the bytes.
func TestReviewRawBytesFieldIsNotOverwrittenByLaterRows(t *testing.T) {
	type item struct {
		ID   int64        `db:"id"`
		Data sql.RawBytes `db:"data"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, data VARCHAR(40) NOT NULL)")
		require.NoError(t, err)
		for i := 1; i <= 4; i++ {
			_, err := db.Exec("INSERT INTO "+table+" (id, data) VALUES ("+ph(d, 1)+", "+ph(d, 2)+")", i, fmt.Sprintf("row-%d-data", i))
			require.NoError(t, err)
		}
		src := sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 4})
		got := readAll(t, src)
		var data []string
		for _, it := range got {
			data = append(data, string(it.Data))
		}
		// Either the type is refused at Open or every item holds its own row's bytes.
		assert.Equal(t, []string{"row-1-data", "row-2-data", "row-3-data", "row-4-data"}, data)
	})
}
