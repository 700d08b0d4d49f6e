package sql_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 9: scan.go's collect says "the shallower field wins, as Go's own
// selectors", but it walks an embedded struct before the fields that
// follow it, and keeps the first field it meets: a field of an embedded
// struct that comes first takes the column, and the item's own field of
// the same column, the one item.Name selects, stays empty.
func TestQueryShallowerFieldTakesTheColumn(t *testing.T) {
	type base struct {
		ID   int64  `db:"id"`
		Name string `db:"name"`
	}
	type item struct {
		base
		Name string `db:"name"` // the item's own: item.Name is this one
	}
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	createOrders(t, db, d, table, 2)
	got := readAll(t, sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}}))
	if assert.Len(t, got, 2) {
		assert.Equal(t, "order-1", got[0].Name, "item.Name, the shallower field, takes the column")
	}
}
