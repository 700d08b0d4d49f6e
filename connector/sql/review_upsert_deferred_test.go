package sql_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Review finding 7: a deferred constraint (DEFERRABLE INITIALLY DEFERRED)
// fails only at COMMIT, where PostgreSQL answers with SQLSTATE 23505 and
// has rolled back: the outcome is known. Write calls every COMMIT error
// unknown (upsert.go, write: case atCommit), so a batch written in
// several statements (MaxParams) is not split: all its rows get
// ErrCommitUnknown and rely on layer 1's retries. With no retries left
// (MaxRetries 0 here; or a spent RetryBudget) the nine good rows are
// dead-lettered with the bad one, against "every other row is written".
// Each good row's dead letter even names the constraint (23505) that
// only the bad row broke. The batch in one statement (MaxParams 0) is
// split and passes.
func TestReviewUpsertDeferredConstraint(t *testing.T) {
	for _, maxParams := range []int{0, 6} {
		t.Run(fmt.Sprint(maxParams), func(t *testing.T) {
			db := openPostgres(t)
			table := tableName(t, db, sluicesql.Postgres)
			_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL, CONSTRAINT " + table + "_uq UNIQUE (email) DEFERRABLE INITIALLY DEFERRED)")
			require.NoError(t, err)
			var items []contact
			for i := range 10 {
				items = append(items, contact{int64(i + 1), str(fmt.Sprintf("%d@x", i+1))})
			}
			items[6].Email = str("2@x")
			dlq := deadletter.NewMemory(20)
			b := pipeline.New("upsert-deferred", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.DeadLetter
				o.ItemRetry.Backoff = resilience.NoBackoff()
				o.ItemRetry.MaxRetries = 0
			}))
			sluicesql.Upsert(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(items...)), db, sluicesql.Postgres, sluicesql.UpsertOptions{Table: table, MaxParams: maxParams})
			p, err := b.Build()
			require.NoError(t, err)
			res, err := p.Run(t.Context())
			require.NoError(t, err)
			st, _ := res.Node("store")
			t.Logf("out %d retries %d dead %d", st.Out, st.ItemRetries, st.DeadLettered)
			var n int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
			assert.Equal(t, 9, n)
			envs := dlq.Envelopes()
			require.Equal(t, 1, len(envs), "dead letters")
			t.Logf("attempts %d: %v", envs[0].Attempts, envs[0].Err)
			var re *sluicesql.RowError
			require.ErrorAs(t, envs[0].Err, &re)
			assert.Equal(t, table+"_uq", re.Constraint)
			assert.NotErrorIs(t, envs[0].Err, sluicesql.ErrCommitUnknown)
			assert.Equal(t, 0, db.Stats().InUse)
		})
	}
}
