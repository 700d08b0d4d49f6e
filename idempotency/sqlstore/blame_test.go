package sqlstore_test

import (
	"context"
	"database/sql"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// deadAddress returns a local address where nothing listens: a
// connection to it is refused, as to a database server that is down.
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// downPostgres returns a store on a PostgreSQL server that is not there:
// the real driver, refused at connection.
func downPostgres(t *testing.T) *sqlstore.Store {
	t.Helper()
	db, err := sql.Open("pgx", "postgres://sluice:sluice@"+deadAddress(t)+"/sluice?connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := sqlstore.New(db, sqlstore.Postgres)
	require.NoError(t, err)
	return s
}

// A database that is down is not the item's fault: every error of the
// store's calls is marked blameless, for each dialect's way of failing.
func TestStoreErrorsAreBlameless(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	check := func(t *testing.T, s *sqlstore.Store) {
		t.Helper()
		_, err := s.Claim(ctx, "order-1", "owner", epoch, time.Minute)
		require.Error(t, err)
		assert.True(t, resilience.IsBlameless(err), "claim: %v", err)
		err = s.Complete(ctx, "order-1", "owner", epoch)
		require.Error(t, err)
		assert.NotErrorIs(t, err, idempotency.ErrLostClaim, "a failure, not an answer")
		assert.True(t, resilience.IsBlameless(err), "complete: %v", err)
		err = s.Release(ctx, "order-1", "owner")
		require.Error(t, err)
		assert.True(t, resilience.IsBlameless(err), "release: %v", err)
	}
	t.Run("postgres refused", func(t *testing.T) {
		t.Parallel()
		check(t, downPostgres(t))
	})
	t.Run("sqlite locked", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "idempotency.db")
		db := openSQLiteAt(t, path)
		s := newStore(t, db, sqlstore.SQLite)
		_, err := s.Claim(ctx, "order-0", "owner", epoch, time.Minute) // the table is made
		require.NoError(t, err)
		// Another process holds the write lock, and this handle does not
		// wait for it.
		other := openSQLiteAt(t, path)
		conn, err := other.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		require.NoError(t, err)
		defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
		_, err = db.ExecContext(ctx, "PRAGMA busy_timeout = 0")
		require.NoError(t, err)
		db.SetMaxOpenConns(1) // the pragma holds for the one connection
		check(t, s)
	})
}

// The answer that a claim was lost is no failure, and keeps its identity.
func TestLostClaimIsNotMarked(t *testing.T) {
	t.Parallel()
	s := newStore(t, openSQLite(t), sqlstore.SQLite)
	err := s.Complete(t.Context(), "never-claimed", "owner", epoch)
	require.ErrorIs(t, err, idempotency.ErrLostClaim)
	assert.False(t, resilience.IsBlameless(err))
}

// A good message is not dead-lettered, nor counted against its broker's
// delivery limit, because the idempotency store is down: the tracked item
// whose retries run out on the store's failure ends Failed (its source
// delivers it again), and nothing is written or dead-lettered.
func TestStoreDownDoesNotDeadLetterAGoodItem(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(epoch)
	dlq := deadletter.NewMemory(10)
	var wrote int
	inner := node.SinkFunc[string](func(context.Context, string) error { wrote++; return nil })
	guard := idempotency.Sink[string](inner, downPostgres(t), func(v string) string { return v }, idempotency.WithClock(clock))
	src := pipelinetest.NewTrackedSource("order-1")
	b := pipeline.New("store-down", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.OnItemFailure = resilience.DeadLetter
		}))
	pipeline.Sink(b, "write", pipeline.Source(b, "read", src), guard)
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(t.Context(), p)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := pipelinetest.AdvanceUntilDone(ctx, clock, run, 100*time.Millisecond)
	require.NoError(t, err)

	assert.Empty(t, dlq.Envelopes(), "a good item is not dead-lettered while the store is down")
	assert.Zero(t, wrote)
	assert.Equal(t, map[int][]node.Outcome{0: {node.Failed}}, src.Outcomes())
	st, ok := res.Node("write")
	require.True(t, ok)
	assert.Equal(t, int64(1), st.ItemRetries, "the store's failure is retried")
}
