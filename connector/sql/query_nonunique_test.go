package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Finding 3: a Key that is not unique (given by mistake: a foreign key, a
// status) would lose, without an error, every row that ties with the last
// row of a page. Two rows of one page with the same key fail the run with
// a *KeyError naming the key's columns and value; the rows read before
// them are emitted, none after.
func TestQueryNonUniqueKeyFailsTheRun(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, grp BIGINT NOT NULL)")
		require.NoError(t, err)
		_, err = db.Exec("INSERT INTO " + table + " (id, grp) VALUES (1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)")
		require.NoError(t, err)
		type item struct {
			ID  int64 `db:"id"`
			Grp int64 `db:"grp"`
		}
		src := sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"grp"}, PageSize: 2})
		b := pipeline.New("read")
		out := &pipelinetest.Collector[item]{}
		pipeline.Sink(b, "collect", pipeline.Source(b, "query", src), out)
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(context.Background())
		require.ErrorIs(t, err, sluicesql.ErrKey)
		var ke *sluicesql.KeyError
		require.True(t, errors.As(err, &ke))
		assert.Equal(t, []string{"grp"}, ke.Columns)
		assert.Equal(t, "(grp=1)", ke.Row)
		assert.ErrorContains(t, err, "key (grp): row (grp=1): two rows have this key: it is not unique")
		assert.Empty(t, out.Items(), "the page with the tie is not emitted")
	})
}

// The check sees only ties within a page: when the page ends with the
// first row of a tie, the next page starts after that key and the rows
// that tie with it are never read. A page of one row sees no tie at all;
// this test shows the limit that docs/sql.md states.
func TestQueryNonUniqueKeyAcrossPagesIsNotSeen(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, grp BIGINT NOT NULL)")
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO " + table + " (id, grp) VALUES (1, 1), (2, 1), (3, 2)")
	require.NoError(t, err)
	type item struct {
		ID  int64 `db:"id"`
		Grp int64 `db:"grp"`
	}
	got := readAll(t, sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"grp"}, PageSize: 1}))
	assert.Len(t, got, 2, "one of the two rows of grp 1 is lost: %v", got)
}

// A page that starts with the row it was to start after fails the run
// rather than read it for ever: here an untyped SQLite column holds the
// integer 10 and the text '10', which SQLite sorts apart (every integer
// before every text) but an int64 field reads alike, so the page after
// 10 starts with '10', whose key is 10 again.
func TestQueryPageThatStartsWithItsPositionFailsTheRun(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (k PRIMARY KEY, v INTEGER NOT NULL)")
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO " + table + " (k, v) VALUES (10, 1), ('10', 2), ('11', 3)")
	require.NoError(t, err)
	type item struct {
		K int64 `db:"k"`
		V int64 `db:"v"`
	}
	out := &emitter[item]{fail: func(i int) error {
		if i >= 10 {
			return errors.New("more items than rows")
		}
		return nil
	}}
	err = sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}, PageSize: 1}).Run(context.Background(), out)
	require.ErrorIs(t, err, sluicesql.ErrKey)
	assert.ErrorContains(t, err, "row (k=10): the page after it starts with it again")
	require.Len(t, out.items, 1, "the first row, then the run fails")
	assert.Equal(t, int64(1), out.items[0].V)
}
