package sql_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// Review finding 11: a transient failure of a batch (a deadlock, a lost
// COMMIT) is retried row by row: one failed batch of n rows costs n
// retries. Under a RetryBudget, which counts a batch of n as n first
// calls, one failed COMMIT of a 100-row batch asks for 100 retries at
// once; a budget of Ratio 0.1 (one retry per ten first calls) grants ten,
// and the other 90 rows, which nothing was wrong with, are dead-lettered
// for a single transient failure.
func TestReviewUpsertTransientBatchUnderRetryBudget(t *testing.T) {
	plain := openSQLite(t)
	var seq int
	var name, path string
	require.NoError(t, plain.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
	lc := &lostCommits{inner: plain.Driver(), dsn: "file:" + filepath.Clean(path) + "?_pragma=busy_timeout(5000)"}
	lc.fail.Store(1)
	db := sql.OpenDB(lc)
	defer db.Close()
	table := productTable(t, db, sluicesql.SQLite)

	clock := clockwork.NewFakeClock()
	budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1, Clock: clock})
	items := products(100)
	// 3 rows a statement: the batch of 100 is one transaction, whose
	// COMMIT fails once, rolled back.
	r := runUpsert(t, t.Context(), db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table, MaxParams: 9}, items,
		pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.RetryBudget = budget
		}))
	require.NoError(t, r.err)
	t.Logf("written %d, dead-lettered %d, retries %d", r.node.Out, r.node.DeadLettered, r.node.ItemRetries)
	assert.Equal(t, len(items), len(rows(t, db, table)), "one transient failure of one batch loses no row")
	assert.Equal(t, 0, len(r.dlq.Envelopes()), "dead letters")
}
