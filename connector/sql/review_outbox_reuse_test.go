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

// lostAnswer is a SQLite connector whose next DELETE, once armed, commits
// and then fails, as a commit whose answer the network lost does.
type lostAnswer struct {
	dsn   string
	armed *atomic.Bool
}

func (c lostAnswer) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return lostAnswerConn{conn, c.armed}, nil
}

func (c lostAnswer) Driver() driver.Driver { return &sqlite.Driver{} }

type lostAnswerConn struct {
	driver.Conn
	armed *atomic.Bool
}

func (c lostAnswerConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	if err == nil && strings.HasPrefix(q, "DELETE") && c.armed.CompareAndSwap(true, false) {
		return nil, errors.New("connection reset by peer (after the commit)")
	}
	return r, err
}

func (c lostAnswerConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

// TestReviewOutboxAmbiguousDeleteKeyReuse (finding 2): a delete whose
// answer was lost is tried again by key. On a SQLite rowid table
// (INTEGER PRIMARY KEY without AUTOINCREMENT) the next row inserted after
// the highest rows were deleted gets the deleted key, and the retried
// delete would remove it unemitted. The review expected such a table to
// work; it cannot, so Open now refuses it, naming Key and AUTOINCREMENT.
// With AUTOINCREMENT the same lost answer is harmless: the deleter tries
// the delete again itself (the run goes on), and the new row, under a new
// key, is emitted.
func TestReviewOutboxAmbiguousDeleteKeyReuse(t *testing.T) {
	for _, ddl := range []string{
		`CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL)`,
		`CREATE TABLE outbox (id integer NOT NULL, topic TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (id))`,
	} {
		db := openSQLite(t)
		_, err := db.Exec(ddl)
		require.NoError(t, err)
		for _, table := range []string{"outbox", "main.outbox"} {
			err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: table}).Open(context.Background())
			require.ErrorIs(t, err, sluicesql.ErrOutboxOptions, ddl)
			var oe *sluicesql.OutboxOptionError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "Key", oe.Field)
			assert.ErrorContains(t, err, "AUTOINCREMENT")
		}
	}
	for _, ddl := range []string{
		`CREATE TABLE outbox (id BIGINT PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL)`, // not a rowid alias
		`CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL) WITHOUT ROWID`,
	} {
		db := openSQLite(t)
		_, err := db.Exec(ddl)
		require.NoError(t, err)
		assert.NoError(t, sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox"}).Open(context.Background()), ddl)
	}

	armed := &atomic.Bool{}
	path := filepath.Join(t.TempDir(), "test.db")
	db := sql.OpenDB(lostAnswer{dsn: "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", armed: armed})
	t.Cleanup(func() { db.Close() })
	d := sluicesql.SQLite
	_, err := db.Exec(`CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload TEXT NOT NULL)`)
	require.NoError(t, err)
	first := outboxInsert(t, db, d, "outbox", "order.created", 1)

	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, "outbox", clock)
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	defer cancel()
	armed.Store(true)
	ran := runOutbox(ctx, src, e)
	(<-e.dones)(node.Delivered)
	// The delete committed, and failed: the deleter waits to try again,
	// Run to poll.
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	require.Empty(t, outboxKeys(t, db, "outbox", ""), "the delete committed")

	// The service commits a new message: AUTOINCREMENT gives it a new key.
	again := outboxInsert(t, db, d, "outbox", "order.paid", 1)
	require.NotEqual(t, first, again, "the key is not taken again")
	clock.Advance(outboxPoll) // the delete is tried again, and the table read
	(<-e.dones)(node.Delivered)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled, "the lost answer did not fail Run")
	require.NoError(t, src.Close(context.Background()))
	require.Len(t, e.items, 2)
	assert.Equal(t, "order.paid", e.items[1].Topic)
	assert.Empty(t, outboxKeys(t, db, "outbox", ""))
}
