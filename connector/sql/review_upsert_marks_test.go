package sql_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Review finding 9: Classifier's doc says "The errors of [Upsert] are
// already marked by these rules, so that a pipeline needs no classifier
// of its own for them", and docs/sql-upsert.md that Upsert's node "needs
// no classifier". Only the transient ones are marked (MarkTransient); a
// constraint violation is left unmarked, so a pipeline whose classifier
// retries more than the default (resilience.AllTransient(), set
// pipeline-wide for an HTTP sink beside the upsert, say) retries a CHECK
// violation MaxRetries times before dead-lettering it.
func TestReviewUpsertPermanentErrorsAreMarked(t *testing.T) {
	db := openSQLite(t)
	table := productTable(t, db, sluicesql.SQLite)
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("upsert-marks", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
		o.ItemRetry.Classifier = resilience.AllTransient()
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	sluicesql.Upsert(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(products(4, 2)...)), db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	envs := dlq.Envelopes()
	require.Equal(t, 1, len(envs))
	assert.Equal(t, 1, envs[0].Attempts, "a CHECK violation, already marked permanent, is not retried")
}
