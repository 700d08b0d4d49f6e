package sql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Review finding 4: a statement that waits for a row lock past the
// session's statement timeout (PostgreSQL statement_timeout: SQLSTATE
// 57014; MariaDB max_statement_time: error 1969) is classified permanent,
// where the same wait ended by lock_timeout (55P03) or
// innodb_lock_wait_timeout (1205) is transient. The row is not at fault:
// another transaction holds its lock. Yet the batch is split, each half
// holding the locked row waits the timeout again (log2(n)+1 waits), and
// the row is dead-lettered at its first attempt, never retried.
func TestReviewUpsertStatementTimeoutIsTransient(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		if d == sluicesql.SQLite {
			t.Skip("SQLite has no statement timeout; its lock wait is SQLITE_BUSY, transient")
		}
		ctx := t.Context()
		table := productTable(t, db, d)
		_, err := db.Exec("INSERT INTO "+table+" (id, name, qty) VALUES ("+placeholders(d, 3)+")", 1, "seed", 1)
		require.NoError(t, err)

		// The upsert's pool: one connection with a short statement timeout.
		var w *sql.DB
		if d == sluicesql.Postgres {
			w = openPostgres(t)
		} else {
			w = openMariaDB(t)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		if d == sluicesql.Postgres {
			_, err = w.Exec("SET statement_timeout = 300")
		} else {
			_, err = w.Exec("SET SESSION max_statement_time = 0.3")
		}
		require.NoError(t, err)

		// Another transaction holds row 1's lock for the whole run.
		other, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer other.Rollback()
		_, err = other.ExecContext(ctx, "UPDATE "+table+" SET qty = 7 WHERE id = 1")
		require.NoError(t, err)

		dlq := deadletter.NewMemory(10)
		b := pipeline.New("upsert-timeout", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.NoBackoff()
		}))
		sluicesql.Upsert(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(products(4)...)), w, d, sluicesql.UpsertOptions{Table: table})
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(ctx)
		require.NoError(t, err)

		envs := dlq.Envelopes()
		require.Len(t, envs, 1, "the locked row, alone")
		t.Logf("dead letter after %d attempt(s): %v", envs[0].Attempts, envs[0].Err)
		// The envelope's error is layer 1's *RetryExhaustedError, which
		// every classifier calls permanent; the row's own is the one
		// classified.
		var re *sluicesql.RowError
		require.ErrorAs(t, envs[0].Err, &re)
		assert.True(t, sluicesql.Classifier(d).IsTransient(re), "a wait for another transaction's lock is transient")
		assert.Equal(t, 3, envs[0].Attempts, "the locked row is retried, as after a lock_timeout")
	})
}
