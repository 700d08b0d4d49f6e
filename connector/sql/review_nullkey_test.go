package sql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Finding 6: QueryOptions.Key says "a row with NULL in one fails the
// run", and Watermark that its column "must be NOT NULL". A row with NULL
// is only seen when it falls in the first page: every later page's
// condition, (k) > (?), is NULL for it. PostgreSQL sorts NULL last, so on
// a table of more than one page such rows are never read and the run
// succeeds. (On every database, a following run never sees a row
// inserted later with NULL there: an updated_at that is NULL until the
// first update is common.)
func TestReviewNullKeyFailsTheRun(t *testing.T) {
	type item struct {
		ID int64  `db:"id"`
		K  *int64 `db:"k"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		for _, opts := range []sluicesql.QueryOptions{
			{Key: []string{"k"}, PageSize: 2},
			{Key: []string{"id"}, Watermark: "k", PageSize: 2},
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
			if err == nil {
				assert.Len(t, out.Items(), 5, "key %v watermark %q: the run succeeded without the row whose key is NULL", opts.Key, opts.Watermark)
			}
			_, err = db.Exec("DROP TABLE " + table)
			require.NoError(t, err)
		}
	})
}
