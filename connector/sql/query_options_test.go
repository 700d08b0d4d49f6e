package sql_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

func TestQueryOptionsValidateJoinsEveryProblem(t *testing.T) {
	t.Parallel()
	err := sluicesql.QueryOptions{
		Key: []string{"id", "", "id"}, Columns: []string{""}, Args: []any{1},
		PageSize: -1, Follow: -1, Watermark: "id",
	}.Validate()
	require.ErrorIs(t, err, sluicesql.ErrQueryOptions)
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var oe *sluicesql.QueryOptionError
		require.True(t, errors.As(e, &oe), "%v", e)
		fields = append(fields, oe.Field)
	}
	assert.Equal(t, []string{"Table", "Watermark", "Key", "Key", "Columns", "Args", "PageSize", "Follow"}, fields)
	assert.Contains(t, err.Error(), "sql: QueryOptions.Table: empty, and so is From")
	assert.Contains(t, err.Error(), `sql: QueryOptions.Key: column "id" is named twice`)

	err = sluicesql.QueryOptions{Table: "a", From: "SELECT 1", Key: []string{"id"}}.Validate()
	assert.EqualError(t, err, `sql: QueryOptions.From: given with Table "a": give one of them`)
	assert.EqualError(t, sluicesql.QueryOptions{Key: []string{"id"}}.Validate(),
		"sql: QueryOptions.Table: empty, and so is From: name the table read, or give a SELECT as From")
	assert.NoError(t, sluicesql.QueryOptions{Table: "t", Key: []string{"id"}}.Validate())
}

func TestQueryOpenChecksOptionsAndItemType(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	ctx := context.Background()

	err := sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{}).Open(ctx)
	require.ErrorIs(t, err, sluicesql.ErrQueryOptions)
	assert.Contains(t, err.Error(), "QueryOptions.Key: empty")

	err = sluicesql.Query[order](nil, sluicesql.Dialect{}, sluicesql.QueryOptions{Table: "t", Key: []string{"id"}}).Open(ctx)
	assert.ErrorContains(t, err, "sql: Query: the *sql.DB is nil")
	assert.ErrorContains(t, err, "sql: Query: the zero Dialect")

	err = sluicesql.Query[int](db, sluicesql.SQLite, sluicesql.QueryOptions{Table: "t", Key: []string{"id"}}).Open(ctx)
	assert.EqualError(t, err, "sql: Query: the item type int is neither a struct nor map[string]any")

	type hidden struct {
		//lint:ignore U1000 unexported: takes no column
		a int
		B int `db:"-"`
	}
	err = sluicesql.Query[hidden](db, sluicesql.SQLite, sluicesql.QueryOptions{Table: "t", Key: []string{"id"}}).Open(ctx)
	assert.ErrorContains(t, err, "has no field to read a column into")

	err = sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{
		Table: "t", Key: []string{"id"}, Columns: []string{"id", "price", "cost"}}).Open(ctx)
	require.ErrorIs(t, err, sluicesql.ErrQueryOptions)
	assert.ErrorContains(t, err, `sql: QueryOptions.Columns: sql_test.order has no field for column "price", "cost"`)

	// A valid query of a table that is not there fails at Open, naming it.
	err = sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{Table: "missing", Key: []string{"id"}}).Open(ctx)
	assert.ErrorContains(t, err, "sql: missing: count the rows:")
}

func TestQueryResumeChecksThePosition(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	table := tableName(t, db, sluicesql.SQLite)
	createOrders(t, db, sluicesql.SQLite, table, 5)
	one := sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{Table: table, Key: []string{"id"}})
	var out emitter[order]
	require.NoError(t, one.Run(context.Background(), &out))
	pos := out.positions[2]

	two := sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{Table: table, Key: []string{"id", "name"}})
	err := two.Resume(pos)
	require.ErrorIs(t, err, sluicesql.ErrPosition)
	assert.ErrorContains(t, err, "it is the position of another query")

	// The bytes after a valid header (the version and the query's
	// fingerprint, 9 bytes) that no source gave.
	header := pos[:9:9]
	bad := [][]byte{{}, {9}, {2}, {1, 1}, header}
	for _, tail := range [][]byte{{2}, {1, 'x'}, {1, 's', 5, 'a'}, {1, 'i', 2, 0}, {1, 'B', 2}, {1, 't', 1, 0}} {
		bad = append(bad, append(header, tail...))
	}
	for _, b := range bad {
		assert.ErrorIs(t, one.Resume(b), sluicesql.ErrPosition, "%v", b)
	}
	require.NoError(t, one.Resume(pos))
	var rest emitter[order]
	require.NoError(t, one.Run(context.Background(), &rest))
	assert.Equal(t, []int64{4, 5}, ids(rest.items))
	require.NoError(t, one.Resume(nil))
	var all emitter[order]
	require.NoError(t, one.Run(context.Background(), &all))
	assert.Equal(t, seq(1, 5), ids(all.items), "nil resumes at the start")
}
