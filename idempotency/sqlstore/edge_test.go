package sqlstore_test

// Edge cases of the store: a retention kept for ever, takeovers racing
// completions, first use from many handles, a role without CREATE.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// WithRetention(math.MaxInt64), "keep forever", keeps a completed key:
// the expiry saturates instead of wrapping to a time long past.
func TestForeverRetention(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
		ctx := context.Background()
		s := newStore(t, db, d, sqlstore.WithRetention(time.Duration(math.MaxInt64)))
		st, err := s.Claim(ctx, "k", "a", epoch, lease)
		require.NoError(t, err)
		require.Equal(t, idempotency.Claimed, st)
		require.NoError(t, s.Complete(ctx, "k", "a", epoch))
		st, err = s.Claim(ctx, "k", "b", epoch.Add(time.Second), lease)
		require.NoError(t, err)
		assert.Equal(t, idempotency.Completed, st, "a key completed a second ago is a duplicate")
	})
}

// Many handles (as many processes) race to take over an expired lease
// while the old owner completes it. Exactly one of: the old owner's
// Complete succeeds and nobody claims; or it is lost and exactly one
// new owner claims.
func TestTakeoverRacesComplete(t *testing.T) {
	t.Parallel()
	type mk func(t *testing.T) []*sqlstore.Store
	run := func(t *testing.T, newStores mk) {
		stores := newStores(t)
		ctx := context.Background()
		wins := map[string]int{}
		for round := range 40 {
			key := fmt.Sprint("race-", round)
			st, err := stores[0].Claim(ctx, key, "old", epoch, lease)
			require.NoError(t, err)
			require.Equal(t, idempotency.Claimed, st)
			now := epoch.Add(lease + time.Duration(round)*time.Millisecond)
			n := len(stores)
			states := make([]idempotency.State, n)
			errs := make([]error, n)
			var completeErr error
			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				<-start
				completeErr = stores[round%n].Complete(ctx, key, "old", now)
			})
			for i := range n {
				wg.Go(func() {
					<-start
					states[i], errs[i] = stores[i].Claim(ctx, key, fmt.Sprint("new-", i), now, lease)
				})
			}
			close(start)
			wg.Wait()
			claimed := 0
			for i := range n {
				require.NoError(t, errs[i], "round %d store %d", round, i)
				if states[i] == idempotency.Claimed {
					claimed++
				}
			}
			switch {
			case completeErr == nil:
				assert.Zero(t, claimed, "round %d: completed, yet claimed", round)
				wins["complete"]++
			case errors.Is(completeErr, idempotency.ErrLostClaim):
				assert.Equal(t, 1, claimed, "round %d", round)
				wins["takeover"]++
			default:
				t.Fatalf("round %d: %v", round, completeErr)
			}
		}
		t.Logf("outcomes: %v", wins)
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		run(t, func(t *testing.T) []*sqlstore.Store {
			first := openPostgres(t)
			table := uniqueTable(t, first)
			var out []*sqlstore.Store
			for range 12 {
				s, err := sqlstore.New(openPostgres(t), sqlstore.Postgres, sqlstore.WithTable(table))
				require.NoError(t, err)
				out = append(out, s)
			}
			return out
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		run(t, func(t *testing.T) []*sqlstore.Store {
			path := filepath.Join(t.TempDir(), "race.db")
			var out []*sqlstore.Store
			for range 8 {
				s, err := sqlstore.New(openSQLiteAt(t, path), sqlstore.SQLite)
				require.NoError(t, err)
				out = append(out, s)
			}
			return out
		})
	})
}

// Many SQLite handles (processes) on one fresh file make their first
// claims at once: each claim is answered, none fails.
func TestSQLiteManyHandlesFirstUse(t *testing.T) {
	t.Parallel()
	for round := range 10 {
		path := filepath.Join(t.TempDir(), fmt.Sprint("fresh-", round, ".db"))
		const n = 12
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			db := openSQLiteAt(t, path)
			wg.Go(func() {
				<-start
				s, err := sqlstore.New(db, sqlstore.SQLite)
				if err == nil {
					_, err = s.Claim(context.Background(), fmt.Sprint("k", i), "o", epoch, lease)
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "round %d handle %d", round, i)
		}
	}
}

// A least-privilege application role (DML on a table an administrator
// made, no CREATE on the schema: PostgreSQL 15's default for the public
// schema) claims: the store finds the table before it would create it.
func TestPostgresLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := openPostgres(t)
	table := uniqueTable(t, admin)
	// The admin creates the table (as a first store would) and the index.
	s, err := sqlstore.New(admin, sqlstore.Postgres, sqlstore.WithTable(table))
	require.NoError(t, err)
	_, err = s.Prune(ctx, epoch)
	require.NoError(t, err)

	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "sluice_review_" + hex.EncodeToString(b[:])
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + table + " TO " + role,
	} {
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "REVOKE ALL ON "+table+" FROM "+role)
		_, _ = admin.ExecContext(context.Background(), "REVOKE ALL ON SCHEMA public FROM "+role)
		_, _ = admin.ExecContext(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	dsn := servicetest.Postgres(t)
	dsn = strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
	app, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { app.Close() })
	// The role can use the table directly.
	_, err = app.ExecContext(ctx, "SELECT count(*) FROM "+table)
	require.NoError(t, err, "the role can read the table")

	as, err := sqlstore.New(app, sqlstore.Postgres, sqlstore.WithTable(table))
	require.NoError(t, err)
	st, err := as.Claim(ctx, "k", "a", epoch, lease)
	require.NoError(t, err, "a role with DML on the existing table claims")
	assert.Equal(t, idempotency.Claimed, st)
}

// As above, but the file is already in WAL mode (one handle opened and
// used it first): only the table's creation races.
func TestSQLiteManyHandlesFirstUseWAL(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		path := filepath.Join(t.TempDir(), fmt.Sprint("wal-", round, ".db"))
		_, err := openSQLiteAt(t, path).ExecContext(context.Background(), "CREATE TABLE other (x INT)")
		require.NoError(t, err)
		const n = 12
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			db := openSQLiteAt(t, path)
			require.NoError(t, db.PingContext(context.Background()))
			wg.Go(func() {
				<-start
				s, err := sqlstore.New(db, sqlstore.SQLite)
				if err == nil {
					_, err = s.Claim(context.Background(), fmt.Sprint("k", i), "o", epoch, lease)
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "round %d handle %d", round, i)
		}
	}
}
