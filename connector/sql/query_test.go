package sql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

func TestQueryReadsEveryRowInKeyOrder(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 25)
		src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 4})
		got := readAll(t, src)
		require.Equal(t, seq(1, 25), ids(got))
		assert.Equal(t, "order-3", got[2].Name)
		require.NotNil(t, got[2].Qty)
		assert.Equal(t, int64(3), *got[2].Qty)
		assert.Nil(t, got[6].Qty, "order 7's NULL quantity")
		assert.Nil(t, got[0].Note)
		assert.Equal(t, int64(25), src.Size())
	})
}
