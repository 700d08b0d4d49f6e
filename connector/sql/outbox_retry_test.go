package sql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
)

// flaky is a SQLite connector that refuses the next refuseDeletes
// DELETEs and refuseReads page reads (SELECTs with ORDER BY), as a
// locked database or a lost connection does, before they run; it says
// on deleted when a DELETE ran.
type flaky struct {
	dsn           string
	refuseDeletes *atomic.Int64
	refuseReads   *atomic.Int64
	deleted       chan struct{}
}

func (c flaky) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return flakyConn{conn, c}, nil
}

func (c flaky) Driver() driver.Driver { return &sqlite.Driver{} }

type flakyConn struct {
	driver.Conn
	c flaky
}

var errFlaky = errors.New("database is locked (test)")

func (c flakyConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	isDelete := strings.HasPrefix(q, "DELETE")
	if isDelete && c.c.refuseDeletes.Add(-1) >= 0 {
		return nil, errFlaky
	}
	r, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	if isDelete && err == nil {
		c.c.deleted <- struct{}{}
	}
	return r, err
}

func (c flakyConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.Contains(q, "ORDER BY") && c.c.refuseReads.Add(-1) >= 0 {
		return nil, errFlaky
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

// openFlaky returns a SQLite database whose deletes and reads fail as
// the counters say, and the outbox table in it.
func openFlaky(t *testing.T) (*sql.DB, flaky) {
	c := flaky{
		dsn:           "file:" + filepath.Join(t.TempDir(), "test.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)",
		refuseDeletes: &atomic.Int64{}, refuseReads: &atomic.Int64{},
		deleted: make(chan struct{}, 100),
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	_, err := db.Exec(`CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload TEXT NOT NULL)`)
	require.NoError(t, err)
	return db, c
}

// TestOutboxDeleteRetried refuses two deletes: the deleter tries again
// after a quarter and a half of PollInterval, on the clock, and the third
// try deletes the rows, while Run goes on.
func TestOutboxDeleteRetried(t *testing.T) {
	db, c := openFlaky(t)
	d := sluicesql.SQLite
	want := outboxInsert(t, db, d, "outbox", "order.created", 3)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, "outbox", clock)
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	defer cancel()
	c.refuseDeletes.Store(2)
	ran := runOutbox(ctx, src, e)
	for range 3 {
		(<-e.dones)(node.Delivered)
	}
	require.NoError(t, clock.BlockUntilContext(ctx, 2), "the deleter waits to try again, Run to poll")
	clock.Advance(outboxPoll / 4)
	require.NoError(t, clock.BlockUntilContext(ctx, 2), "the deleter waits to try again")
	assert.Len(t, c.deleted, 0, "nothing deleted yet")
	clock.Advance(outboxPoll / 2)
	<-c.deleted
	assert.Empty(t, outboxKeys(t, db, "outbox", ""), "the third try deleted the rows")
	clock.Advance(outboxPoll / 4) // the poll: Run went on, emits nothing again
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled, "the refused deletes did not fail Run")
	require.NoError(t, src.Close(context.Background()))
	assert.Equal(t, want, outboxIDs(e.items))
}

// TestOutboxReadRetried refuses two page reads: the source tries again
// after a wait on the clock, keeps the rows in flight held, and emits
// every row once.
func TestOutboxReadRetried(t *testing.T) {
	db, c := openFlaky(t)
	d := sluicesql.SQLite
	want := outboxInsert(t, db, d, "outbox", "order.created", 5)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, "outbox", clock, func(o *sluicesql.OutboxOptions) { o.PageSize = 2 })
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	defer cancel()
	require.NoError(t, src.Open(ctx))
	c.refuseReads.Store(2)
	ran := runOutbox(ctx, src, e)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the source waits to read again")
	assert.Empty(t, e.dones)
	clock.Advance(outboxPoll / 4)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the source waits to read again")
	clock.Advance(outboxPoll / 2)
	for range 5 {
		(<-e.dones)(node.Delivered)
	}
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled, "the refused reads did not fail Run")
	require.NoError(t, src.Close(context.Background()))
	assert.Equal(t, want, outboxIDs(e.items))
	assert.Empty(t, outboxKeys(t, db, "outbox", ""))
}

// TestOutboxFailedWaits settles a row Failed while the run goes on (a
// blameless failure): the outbox emits it again, but not at a pass that
// starts less than PollInterval after the failure.
func TestOutboxFailedWaits(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	all := outboxInsert(t, db, d, table, "order.created", 3)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, table, clock)
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	defer cancel()
	ran := runOutbox(ctx, src, e)
	dones := []func(node.Outcome){<-e.dones, <-e.dones, <-e.dones}
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	clock.Advance(outboxPoll / 2)
	dones[0](node.Delivered)
	dones[1](node.Failed) // half a PollInterval before the next pass
	dones[2](node.Delivered)
	clock.Advance(outboxPoll / 2) // the pass
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	assert.Empty(t, e.dones, "not emitted again before PollInterval passed")
	clock.Advance(outboxPoll) // the next pass
	(<-e.dones)(node.Delivered)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	require.NoError(t, src.Close(context.Background()))
	assert.Equal(t, append(all[:3:3], all[1]), outboxIDs(e.items))
	assert.Empty(t, outboxKeys(t, db, table, ""))
}

// TestOutboxFailedWaitsAcrossRestart ends a Run (as a node restart
// does, without Close) just after an item failed: the next Run waits
// PollInterval before it emits the row again, and emits the row in flight
// not at all; after Close, a Run emits a failed row at once.
func TestOutboxFailedWaitsAcrossRestart(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	all := outboxInsert(t, db, d, table, "order.created", 3)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, table, clock)
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	ran := runOutbox(ctx, src, e)
	dones := []func(node.Outcome){<-e.dones, <-e.dones, <-e.dones}
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	dones[0](node.Failed)
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)

	ctx, cancel = context.WithCancel(outboxContext(t))
	ran = runOutbox(ctx, src, e)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the restarted outbox polls")
	assert.Empty(t, e.dones, "nothing emitted again at once")
	clock.Advance(outboxPoll)
	(<-e.dones)(node.Failed) // fails again
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	dones[1](node.Delivered)
	dones[2](node.Delivered)
	require.NoError(t, src.Close(context.Background()))

	// The pipeline's next run: Close forgot the failed row.
	ctx, cancel = context.WithCancel(outboxContext(t))
	defer cancel()
	ran = runOutbox(ctx, src, e)
	(<-e.dones)(node.Delivered)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	require.NoError(t, src.Close(context.Background()))
	assert.Equal(t, []int64{all[0], all[1], all[2], all[0], all[0]}, outboxIDs(e.items))
	assert.Empty(t, outboxKeys(t, db, table, ""))
}
