package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Finding 5: a row with NULL in a key or watermark column would be seen
// only in the first page: every later page's condition, (k) > (?), is
// NULL for it, and PostgreSQL sorts NULL last, so on a table of more than
// one page it would never be read. Open counts such rows (of Where) and
// fails the run with a *KeyError naming the column, before any row is
// emitted.
func TestQueryNullKeyFailsTheRun(t *testing.T) {
	type item struct {
		ID int64  `db:"id"`
		K  *int64 `db:"k"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		for _, opts := range []sluicesql.QueryOptions{
			{Key: []string{"k"}, PageSize: 2},
			{Key: []string{"id"}, Watermark: "k", PageSize: 2},
			{Key: []string{"id", "k"}, PageSize: 2, Follow: time.Hour},
		} {
			table := tableName(t, db, d)
			_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, k BIGINT UNIQUE)")
			require.NoError(t, err)
			_, err = db.Exec("INSERT INTO " + table + " (id, k) VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, NULL)")
			require.NoError(t, err)
			opts.Table = table
			b := pipeline.New("read")
			out := &pipelinetest.Collector[item]{}
			pipeline.Sink(b, "collect", pipeline.Source(b, "query", sluicesql.Query[item](db, d, opts)), out)
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(context.Background())
			require.ErrorIs(t, err, sluicesql.ErrKey, "key %v watermark %q", opts.Key, opts.Watermark)
			var ke *sluicesql.KeyError
			require.True(t, errors.As(err, &ke))
			assert.Equal(t, table, ke.Source)
			assert.ErrorContains(t, err, `1 rows have NULL in column "k"`)
			assert.Empty(t, out.Items())

			// A Where that leaves the row out reads the others.
			opts.Where, opts.Follow = "k IS NOT NULL", 0
			got := readAll(t, sluicesql.Query[item](db, d, opts))
			assert.Len(t, got, 4)
			_, err = db.Exec("DROP TABLE " + table)
			require.NoError(t, err)
		}
	})
}

// A row with NULL in the key that appears after Open looked (in the first
// page, where no condition on the key leaves it out) fails the page with
// a *ScanError that names the row before it: the start, or on PostgreSQL,
// which sorts NULL last, the key of the row before it in the page.
func TestQueryNullKeyAfterOpenNamesTheRowBefore(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT NOT NULL, k BIGINT UNIQUE)")
		require.NoError(t, err)
		_, err = db.Exec("INSERT INTO " + table + " (id, k) VALUES (1, 1), (2, 2)")
		require.NoError(t, err)
		src := sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}})
		require.NoError(t, src.Open(context.Background()))
		_, err = db.Exec("INSERT INTO " + table + " (id, k) VALUES (3, NULL)")
		require.NoError(t, err)
		out := &emitter[map[string]any]{}
		err = src.Run(context.Background(), out)
		require.ErrorIs(t, err, sluicesql.ErrScan)
		var se *sluicesql.ScanError
		require.True(t, errors.As(err, &se))
		assert.Equal(t, "k", se.Column)
		want := "after the start"
		if d == sluicesql.Postgres {
			want = "after (k=2)"
		}
		assert.Equal(t, want, se.Row)
		assert.Empty(t, out.items, "the page is not emitted")
	})
}
