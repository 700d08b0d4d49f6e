package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// A store whose connection's search_path is "app,public", beside a table
// of the same name in public (another job's): it makes and uses its table
// in app, where CREATE TABLE puts it. It looked the table up with
// to_regclass, which searches the whole path, found public's, and took a
// key the other job completed for its own: the item was skipped as a
// duplicate and never written (a review's finding).
func TestStoreInASchemaLeavesPublicsTable(t *testing.T) {
	pub := openPostgres(t)
	ctx := context.Background()
	schema := fmt.Sprintf("idem_app_%d", time.Now().UnixNano()%1e12)
	_, err := pub.ExecContext(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pub.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	other := newStore(t, pub, sqlstore.Postgres) // another job's table, in public
	now := time.Now()
	_, err = other.Claim(ctx, "pay-1", "X", now, time.Minute)
	require.NoError(t, err)
	require.NoError(t, other.Complete(ctx, "pay-1", "X", now))

	dsn := servicetest.Postgres(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	app, err := sql.Open("pgx", dsn+sep+"search_path="+schema+",public")
	require.NoError(t, err)
	t.Cleanup(func() { app.Close() })
	mine, err := sqlstore.New(app, sqlstore.Postgres, sqlstore.WithTable(other.Table()))
	require.NoError(t, err)
	st, err := mine.Claim(ctx, "pay-1", "Y", now, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, st, "a key of public's table answered in schema %s's store", schema)
	var n int
	require.NoError(t, pub.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`."`+other.Table()+`"`).Scan(&n))
	assert.Equal(t, 1, n, "the claim is in %s's own table", schema)
	st, err = other.Claim(ctx, "pay-1", "Z", now, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Completed, st, "public's table is untouched")
}

// A Claim whose context is done changes nothing (the Store contract),
// the automatic prune's clock included: a cancelled Claim moved the last
// prune's time forward, its DELETE failed, and the prune did not run
// again for a whole interval (a review's finding).
func TestCancelledClaimLeavesTheNextPruneDue(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db, sqlstore.SQLite, sqlstore.WithRetention(time.Minute), sqlstore.WithPruneInterval(time.Hour))
	ctx := context.Background()
	base := time.Now().Add(-5 * time.Hour) // behind the database's clock, which bounds an automatic prune
	_, err := s.Claim(ctx, "x", "A", base, time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "x", "A", base))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Claim(cancelled, "y", "A", base.Add(2*time.Hour), time.Second)
	require.ErrorIs(t, err, context.Canceled)
	// Due still: this Claim prunes "x", past its retention.
	_, err = s.Claim(ctx, "z", "A", base.Add(2*time.Hour+time.Minute), time.Second)
	require.NoError(t, err)
	n, err := s.Prune(ctx, base.Add(2*time.Hour))
	require.NoError(t, err)
	assert.Zero(t, n, "the automatic prune after the cancelled Claim left rows past their retention")
}

// A claim whose lease ran out and that nobody took over still completes
// within the retention after its lease; past it, the store's prune drops
// it as abandoned, and its owner's Complete then finds it lost, as the
// Store contract and docs/idempotency.md say (a review asked: the
// contract said such a claim completes, without the bound).
func TestAbandonedClaimCompletesUntilPruned(t *testing.T) {
	for name, open := range map[string]func(*testing.T) (*sql.DB, sqlstore.Dialect){
		"sqlite":   func(t *testing.T) (*sql.DB, sqlstore.Dialect) { return openSQLite(t), sqlstore.SQLite },
		"postgres": func(t *testing.T) (*sql.DB, sqlstore.Dialect) { return openPostgres(t), sqlstore.Postgres },
	} {
		t.Run(name, func(t *testing.T) {
			db, d := open(t)
			ctx := context.Background()
			s := newStore(t, db, d, sqlstore.WithRetention(time.Minute), sqlstore.WithPruneInterval(0))
			base := time.Now().Add(-3 * time.Hour)
			for _, key := range []string{"kept", "pruned"} {
				st, err := s.Claim(ctx, key, "A", base, time.Second)
				require.NoError(t, err)
				require.Equal(t, idempotency.Claimed, st)
			}
			_, err := s.Prune(ctx, base.Add(time.Second+time.Minute-time.Millisecond))
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, "kept", "A", base.Add(time.Minute)), "within the retention after the lease")
			_, err = s.Prune(ctx, base.Add(time.Second+time.Minute))
			require.NoError(t, err)
			require.ErrorIs(t, s.Complete(ctx, "pruned", "A", base.Add(2*time.Minute)), idempotency.ErrLostClaim)
		})
	}
}

// A Claim whose context ends while its automatic prune waits (here on a
// row another transaction locked) counts as a failed prune, tried at the
// next interval: the next Claim does not prune again. A first fix put
// the prune back as due, so every Claim pruned, waited and failed while
// the prune outlasted their deadlines (a second review's finding).
func TestClaimCancelledDuringItsPruneLeavesTheOthersAlone(t *testing.T) {
	db := openPostgres(t)
	ctx := context.Background()
	s := newStore(t, db, sqlstore.Postgres, sqlstore.WithRetention(time.Minute), sqlstore.WithPruneInterval(time.Hour))
	base := time.Now().Add(-5 * time.Hour) // behind the database's clock, which bounds an automatic prune
	_, err := s.Claim(ctx, "old", "A", base, time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "old", "A", base))
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM "`+s.Table()+`" FOR UPDATE`)
	require.NoError(t, err)

	// The first Claim an interval later prunes, and waits for the lock.
	first, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.Claim(first, "a", "A", base.Add(2*time.Hour), time.Minute)
		done <- err
	}()
	waiting := func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM "`+s.Table()+`"%'`).Scan(&n)
		return err == nil && n > 0
	}
	deadline := time.Now().Add(time.Minute)
	for !waiting() {
		require.True(t, time.Now().Before(deadline), "the prune never waited for the lock")
		select {
		case err := <-done:
			t.Fatalf("the first Claim ended before its prune waited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	require.Error(t, <-done)

	// The lock is still held: a Claim that pruned again would wait for
	// it until its deadline.
	next, cancelNext := context.WithTimeout(ctx, 30*time.Second)
	defer cancelNext()
	st, err := s.Claim(next, "b", "A", base.Add(2*time.Hour+time.Minute), time.Minute)
	require.NoError(t, err, "the next Claim pruned again")
	require.Equal(t, idempotency.Claimed, st)
}
