package sql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Finding 3: a Key that is not unique (given by mistake: a foreign key, a
// status) loses, without an error, every row that ties with the last row
// of a page. The page already holds two rows with the same key, which the
// source could see and refuse; it reads on, and the run succeeds.
func TestReviewNonUniqueKeyFailsOrReadsEveryRow(t *testing.T) {
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
		if err == nil {
			require.Len(t, out.Items(), 6, "the run succeeded, so every row was read: got %v", out.Items())
		}
	})
}
