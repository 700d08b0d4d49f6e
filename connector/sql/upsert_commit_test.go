package sql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// errLost is the error of a COMMIT whose answer was lost.
var errLost = errors.New("connection lost while committing")

// lostCommits opens SQLite connections whose next fail COMMITs report
// errLost: after committing when written is set, as when the connection
// drops after the database committed, else after rolling back.
type lostCommits struct {
	inner   driver.Driver
	dsn     string
	fail    atomic.Int32
	written bool
}

func (c *lostCommits) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &lostConn{Conn: conn, c: c}, nil
}

func (c *lostCommits) Driver() driver.Driver { return c.inner }

type lostConn struct {
	driver.Conn
	c *lostCommits
}

func (c *lostConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &lostTx{Tx: tx, c: c.c}, nil
}

type lostTx struct {
	driver.Tx
	c *lostCommits
}

func (t *lostTx) Commit() error {
	if t.c.fail.Add(-1) < 0 {
		return t.Tx.Commit()
	}
	if !t.c.written {
		_ = t.Tx.Rollback()
		return errLost
	}
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	return errLost
}

// A COMMIT that fails leaves the batch's outcome unknown: the batch is
// written again whole, at once, and when that COMMIT fails too, each row
// gets an error matching ErrCommitUnknown, transient, and is written again
// alone, whether the database had written it or not; none is
// dead-lettered, and no row is written twice. (One failed COMMIT alone:
// TestReviewUpsertTransientBatchUnderRetryBudget.)
func TestUpsertCommitUnknownIsRetried(t *testing.T) {
	for _, written := range []bool{true, false} {
		t.Run(map[bool]string{true: "written", false: "not-written"}[written], func(t *testing.T) {
			plain := openSQLite(t)
			var seq int
			var name, path string
			require.NoError(t, plain.QueryRow("PRAGMA database_list").Scan(&seq, &name, &path))
			lc := &lostCommits{inner: plain.Driver(), dsn: "file:" + filepath.Clean(path) + "?_pragma=busy_timeout(5000)", written: written}
			lc.fail.Store(2) // the batch and its retry whole
			db := sql.OpenDB(lc)
			defer db.Close()
			table := productTable(t, db, sluicesql.SQLite)

			rec := &pipelinetest.Recorder{}
			items := products(10)
			// 3 rows a statement: the batch of 10 is one transaction.
			r := runUpsert(t, t.Context(), db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: table, MaxParams: 9}, items,
				pipeline.WithObserver(rec), pipeline.WithResilience(func(o *resilience.Options) {
					o.OnItemFailure = resilience.DeadLetter
					o.ItemRetry.MaxRetries = 1
					o.ItemRetry.Backoff = resilience.NoBackoff()
				}))
			require.NoError(t, r.err)
			assert.Equal(t, items, rows(t, db, table))
			assert.Empty(t, r.dlq.Envelopes())
			assert.Equal(t, int64(10), r.node.Out)
			assert.Equal(t, int64(10), r.node.ItemRetries)
			retries := pipelinetest.Of[observer.RetryEvent](rec)
			require.Len(t, retries, 10)
			for _, e := range retries {
				assert.ErrorIs(t, e.Err, sluicesql.ErrCommitUnknown)
				assert.ErrorIs(t, e.Err, errLost)
				assert.True(t, resilience.IsTransient(e.Err))
			}
		})
	}
}
