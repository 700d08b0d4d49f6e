package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A deadlock between an upsert and another transaction that locks the
// same rows in the opposite order is transient: the upsert's batch is
// written again whole, at once, and waits for the other transaction's
// locks, so that it passes as a rule; if it deadlocks again, each row is
// retried alone by layer 1 and written. On SQLite, which has no row locks, the same
// part is played by SQLITE_BUSY while another connection writes.
func TestUpsertDeadlockIsRetried(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		if d == sluicesql.SQLite {
			busyIsRetried(t, db)
			return
		}
		table := productTable(t, db, d)
		ctx := t.Context()
		// 60 rows; the other transaction updates 59 of them, so that
		// MariaDB, which rolls back the smaller transaction, picks the
		// upsert's.
		for i := 1; i <= 60; i++ {
			_, err := db.Exec("INSERT INTO "+table+" (id, name, qty) VALUES ("+placeholders(d, 3)+")", i, "seed", i)
			require.NoError(t, err)
		}
		other, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer other.Rollback()
		if d == sluicesql.Postgres {
			// PostgreSQL's victim is the transaction whose deadlock check
			// runs first; each runs deadlock_timeout (1 s) after it began
			// to wait. The upsert waits first, so it is the victim, unless
			// a loaded machine delays it: the other transaction checks
			// late, when a superuser may say so.
			var super string
			require.NoError(t, other.QueryRowContext(ctx, "SELECT current_setting('is_superuser')").Scan(&super))
			if super == "on" {
				_, err = other.ExecContext(ctx, "SET LOCAL deadlock_timeout = '20s'")
				require.NoError(t, err)
			}
		}
		_, err = other.ExecContext(ctx, "UPDATE "+table+" SET qty = qty + 1000 WHERE id >= 2")
		require.NoError(t, err)

		rec := &pipelinetest.Recorder{}
		dlq := deadletter.NewMemory(10)
		b := pipeline.New("upsert-deadlock", pipeline.WithDeadLetter(dlq), pipeline.WithObserver(rec),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.DeadLetter
				o.ItemRetry.MaxRetries = 3
				o.ItemRetry.Backoff = resilience.NoBackoff()
			}))
		items := []product{{ID: 1, Name: str("mine"), Qty: 500}, {ID: 2, Name: str("mine"), Qty: 501}}
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table})
		require.NoError(t, err)
		pipeline.ForEachBatch(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(items...)), u.BatchSize(), 0, u.Write)
		p, err := b.Build()
		require.NoError(t, err)
		run := pipelinetest.Start(ctx, p)

		// The upsert holds row 1 and waits for row 2; then the other
		// transaction asks for row 1.
		waitForLockWait(t, ctx, db, d, table)
		_, err = other.ExecContext(ctx, "UPDATE "+table+" SET qty = qty + 1000 WHERE id = 1")
		require.NoError(t, err, "the upsert, not the other transaction, is the deadlock's victim")
		require.NoError(t, other.Commit())

		res, err := run.Wait()
		require.NoError(t, err)
		got := rows(t, db, table)
		// Row 2 is written after the other transaction commits; row 1's
		// retry may take its lock before the other transaction's second
		// update does, which then adds 1000 to it.
		assert.Equal(t, items[1], got[1])
		assert.Equal(t, items[0].Name, got[0].Name)
		assert.Contains(t, []int{500, 1500}, got[0].Qty)
		assert.Empty(t, dlq.Envelopes())
		st, _ := res.Node("store")
		assert.Equal(t, int64(2), st.Out)
		assert.Equal(t, int64(1), u.BatchRetries(), "the batch written again whole, once")
		// The second try may take row 1 before the other transaction's
		// woken update does, and deadlock again: then each row is
		// retried alone, once, by layer 1, with the deadlock's code.
		retries := pipelinetest.Of[observer.RetryEvent](rec)
		if st.ItemRetries == 0 {
			assert.Empty(t, retries)
			return
		}
		t.Log("the batch's second try deadlocked too")
		assert.Equal(t, int64(2), st.ItemRetries, "each row retried alone, once")
		require.NotEmpty(t, retries)
		var re *sluicesql.RowError
		require.ErrorAs(t, retries[0].Err, &re)
		want := map[sluicesql.Dialect]string{sluicesql.Postgres: "40P01", sluicesql.MySQL: "1213"}[d]
		assert.Equal(t, want, re.Code)
		assert.True(t, resilience.IsTransient(retries[0].Err), "marked transient for the default classifier")
	})
}

// placeholders returns n placeholders of d, for the tests' own statements.
func placeholders(d sluicesql.Dialect, n int) string {
	s := ""
	for i := 1; i <= n; i++ {
		if i > 1 {
			s += ", "
		}
		if d == sluicesql.Postgres {
			s += "$" + string(rune('0'+i))
		} else {
			s += "?"
		}
	}
	return s
}

// waitForLockWait polls the server until a statement on table waits for a
// row lock. It waits on the database, not on a clock. On MariaDB it
// waits for the upsert's statement to run (which it can finish only once
// it has row 2): INNODB_TRX, which shows lock waits, is a cache that a
// busy poll never lets refresh.
func waitForLockWait(t *testing.T, ctx context.Context, db *sql.DB, d sluicesql.Dialect, table string) {
	t.Helper()
	q := "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0"
	if d == sluicesql.MySQL {
		q = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO %' AND LOCATE(?, INFO) > 0"
	}
	for {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, q, table).Scan(&n))
		if n > 0 {
			return
		}
		require.NoError(t, ctx.Err())
	}
}

// busyIsRetried shows SQLITE_BUSY retried: another connection holds the
// write lock while the upsert's first attempt fails at once (no busy
// timeout), and lets it go while the retry waits on the fake clock.
func busyIsRetried(t *testing.T, db *sql.DB) {
	ctx := t.Context()
	table := productTable(t, db, sluicesql.SQLite)
	var seq int
	var name, path string
	require.NoError(t, db.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
	writer, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	defer writer.Close()

	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("upsert-busy", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
		}))
	items := products(2)
	sluicesql.Upsert(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(items...)), writer, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table})
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(ctx, p)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the first row's retry waits")
	_, err = holder.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	res, err := pipelinetest.AdvanceUntilDone(ctx, clock, run, time.Second)
	require.NoError(t, err)
	assert.Equal(t, items, rows(t, db, table))
	st, _ := res.Node("store")
	assert.Equal(t, int64(2), st.ItemRetries)
	retries := pipelinetest.Of[observer.RetryEvent](rec)
	require.NotEmpty(t, retries)
	var re *sluicesql.RowError
	require.ErrorAs(t, retries[0].Err, &re)
	assert.Equal(t, "SQLITE_BUSY", re.Code)
	assert.False(t, errors.Is(retries[0].Err, sluicesql.ErrCommitUnknown))
}
