package sql_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 4: Resume's doc says "a position of another query, or bytes no
// source gave, is an error that wraps [ErrPosition]". Only a position of
// another number of columns is refused: the position of a query on
// another table, keyed on a column of another type, is taken, and the
// run then reads from wherever the other type sorts: on SQLite every
// integer sorts before every text, so a name's position given to the
// query keyed on id reads nothing, and the run succeeds.
func TestQueryResumeRefusesThePositionOfAnotherQuery(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	orders := tableName(t, db, d)
	createOrders(t, db, d, orders, 5)

	byID := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: orders, Key: []string{"id"}})
	out := &emitter[order]{}
	require.NoError(t, byID.Run(context.Background(), out))
	require.Len(t, out.positions, 5)
	pos := out.positions[2] // id 3

	type named struct {
		Name string `db:"name"`
	}
	byName := sluicesql.Query[named](db, d, sluicesql.QueryOptions{Table: orders, Key: []string{"name"}})
	assert.ErrorIs(t, byName.Resume(pos), sluicesql.ErrPosition, "a position of a query keyed on id (an integer) given to one keyed on name (text)")

	names := &emitter[named]{}
	require.NoError(t, byName.Run(context.Background(), names))
	again := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: orders, Key: []string{"id"}})
	if err := again.Resume(names.positions[0]); err == nil { // name "order-1"
		got := &emitter[order]{}
		require.NoError(t, again.Run(context.Background(), got))
		assert.NotEmpty(t, got.items, "resumed from another query's position, the run read nothing and succeeded")
	}
}
