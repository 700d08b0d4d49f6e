package sql_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// TestReviewOutboxSQLiteExampleDSN (finding 3): ExampleOutbox opens SQLite
// as sql.Open("sqlite", path): no WAL, no busy_timeout. The outbox reads
// pages on one connection while its deleting goroutine deletes on another;
// in SQLite's rollback-journal mode they lock each other out ("database is
// locked"), and with the default resilience (NodeRestart.MaxRestarts 0)
// that error ends the run. The fix is the DSN: the Example and the docs
// now open SQLite with WAL and a busy timeout, and this test uses that
// DSN. (The outbox also tries a failed read or delete again, three times,
// after waits on its clock; with the old DSN that does not help a test
// whose fake clock nobody moves, nor much a real one: without
// busy_timeout SQLite refuses at once, every time the two meet.)
func TestReviewOutboxSQLiteExampleDSN(t *testing.T) {
	const n = 1000
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "shop.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	d := sluicesql.SQLite
	_, err = db.Exec(`CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload TEXT NOT NULL)`)
	require.NoError(t, err)
	outboxInsert(t, db, d, "outbox", "order.created", n)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, "outbox", clock, func(o *sluicesql.OutboxOptions) { o.PageSize = 5; o.DeleteBatch = 1 })
	var p *pipeline.Pipeline
	got := 0
	b := pipeline.New("publish", pipeline.WithClock(clock))
	pipeline.Sink(b, "broker", pipeline.Source(b, "outbox", node.Source[outboxEvent](src)),
		node.SinkFunc[outboxEvent](func(context.Context, outboxEvent) error {
			if got++; got == n {
				p.Drain()
			}
			return nil
		}))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(outboxContext(t))
	require.NoError(t, err)
}
