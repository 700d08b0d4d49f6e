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

// TestReviewOutboxAmbiguousDeleteKeyReuse (finding 2): deleteSettled's
// comment says "a delete is idempotent, so one that failed after it
// committed does no harm when tried again". It is not when the key is
// taken again: on a SQLite rowid table (INTEGER PRIMARY KEY without
// AUTOINCREMENT, which OutboxOptions.Key does not refuse) the next row
// inserted after the highest rows were deleted gets the deleted key. The
// outbox skips it as "settled, not yet deleted", and the retried delete
// removes it: a row committed by the service is never emitted, and gone.
func TestReviewOutboxAmbiguousDeleteKeyReuse(t *testing.T) {
	armed := &atomic.Bool{}
	path := filepath.Join(t.TempDir(), "test.db")
	db := sql.OpenDB(lostAnswer{dsn: "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", armed: armed})
	t.Cleanup(func() { db.Close() })
	d := sluicesql.SQLite
	_, err := db.Exec(`CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL)`)
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
	err = <-ran // the delete committed, and failed
	require.ErrorIs(t, err, sluicesql.ErrOutbox)
	require.Empty(t, outboxKeys(t, db, "outbox", ""), "the delete committed")

	// The service commits a new message: SQLite gives it the free key.
	again := outboxInsert(t, db, d, "outbox", "order.paid", 1)
	require.Equal(t, first, again, "the key is taken again")

	// The source's layers run it again.
	ran = runOutbox(ctx, src, e)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	require.NoError(t, src.Close(context.Background()))

	emitted := len(e.items) == 2 && e.items[1].Topic == "order.paid"
	left := outboxKeys(t, db, "outbox", "")
	assert.True(t, emitted || len(left) == 1, "the order.paid row was neither emitted (items %v) nor left in the table (%v): lost", e.items, left)
}
