package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// An outboxEvent is a row of the outbox tables of the tests.
type outboxEvent struct {
	ID      int64  `db:"id"`
	Topic   string `db:"topic"`
	Payload string `db:"payload"`
}

// outboxPoll is the outboxes' PollInterval in the tests, on a fake clock.
const outboxPoll = time.Second

// outboxDDL is the outbox table of each dialect.
var outboxDDL = map[string]string{
	"sqlite": `CREATE TABLE %s (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL,
		payload TEXT NOT NULL, published_at TIMESTAMP NULL)`,
	"postgres": `CREATE TABLE %s (id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL,
		payload TEXT NOT NULL, published_at TIMESTAMP NULL)`,
	"mysql": `CREATE TABLE %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(200) NOT NULL,
		payload TEXT NOT NULL, published_at TIMESTAMP NULL)`,
}

// outboxTable creates an outbox table of the test's own.
func outboxTable(t *testing.T, db *sql.DB, d sluicesql.Dialect) string {
	t.Helper()
	table := tableName(t, db, d)
	_, err := db.Exec(fmt.Sprintf(outboxDDL[d.String()], table))
	require.NoError(t, err)
	return table
}

// ph is the n-th placeholder of d.
func outboxPH(d sluicesql.Dialect, n int) string {
	if d == sluicesql.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// outboxBatches numbers the calls of outboxInsert, so that each finds
// its own rows while an outbox deletes others.
var outboxBatches atomic.Int64

// outboxInsert adds n rows of topic to table, as a service would, and
// returns their keys.
func outboxInsert(t *testing.T, db *sql.DB, d sluicesql.Dialect, table, topic string, n int) []int64 {
	t.Helper()
	batch := outboxBatches.Add(1)
	q := "INSERT INTO " + table + " (topic, payload) VALUES (" + outboxPH(d, 1) + ", " + outboxPH(d, 2) + ")"
	// One transaction, as a service's, and quicker than a commit a row.
	tx, err := db.Begin()
	require.NoError(t, err)
	for i := range n {
		_, err := tx.Exec(q, topic, fmt.Sprintf("batch %d row %d of %s: ünïcode ✓", batch, i, topic))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	ks := outboxKeys(t, db, table, fmt.Sprintf("WHERE payload LIKE 'batch %d row %%'", batch))
	require.Len(t, ks, n)
	return ks
}

// keys returns the keys of table's rows (where is a WHERE clause, or
// empty), in order.
func outboxKeys(t *testing.T, db *sql.DB, table, where string) []int64 {
	t.Helper()
	rows, err := db.Query("SELECT id FROM " + table + " " + where + " ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	ks := []int64{}
	for rows.Next() {
		var k int64
		require.NoError(t, rows.Scan(&k))
		ks = append(ks, k)
	}
	require.NoError(t, rows.Err())
	return ks
}

// newOutbox returns an outbox of table on clock, with opts changed by
// change.
func newOutbox(t *testing.T, db *sql.DB, d sluicesql.Dialect, table string, clock clockwork.Clock, change ...func(*sluicesql.OutboxOptions)) *sluicesql.OutboxSource[outboxEvent] {
	t.Helper()
	opts := sluicesql.OutboxOptions{Table: table, PageSize: 100, PollInterval: outboxPoll, Clock: clock}
	for _, c := range change {
		c(&opts)
	}
	return sluicesql.Outbox[outboxEvent](db, d, opts)
}

// An outboxRun is a pipeline run from an outbox to a sink that sends what
// it writes to got.
type outboxRun struct {
	ctx   context.Context
	clock *clockwork.FakeClock
	got   chan outboxEvent
	p     *pipeline.Pipeline
	run   *pipelinetest.Running
}

// startOutbox runs src into a sink that sends each item to got, then
// calls write (when not nil) and returns its error. The pipeline has no
// item retry, and runs on clock.
func startOutbox(t *testing.T, ctx context.Context, clock *clockwork.FakeClock, src *sluicesql.OutboxSource[outboxEvent], write func(context.Context, outboxEvent) error, opts ...pipeline.Option) *outboxRun {
	t.Helper()
	r := &outboxRun{ctx: ctx, clock: clock, got: make(chan outboxEvent, 10_000)}
	opts = append([]pipeline.Option{
		pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }),
	}, opts...)
	b := pipeline.New("outbox", opts...)
	events := pipeline.Source(b, "outbox", node.Source[outboxEvent](src))
	pipeline.Sink(b, "store", events, node.SinkFunc[outboxEvent](func(ctx context.Context, e outboxEvent) error {
		if write != nil {
			if err := write(ctx, e); err != nil {
				return err
			}
		}
		r.got <- e
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	r.p = p
	r.run = pipelinetest.Start(ctx, p)
	t.Cleanup(func() { r.run.Wait() })
	return r
}

// receive returns the next n items the sink wrote.
func (r *outboxRun) receive(t *testing.T, n int) []outboxEvent {
	t.Helper()
	var es []outboxEvent
	for len(es) < n {
		select {
		case e := <-r.got:
			es = append(es, e)
		case <-r.run.Done():
			_, err := r.run.Wait()
			t.Fatalf("the run ended after %d items of %d: %v", len(es), n, err)
		case <-r.ctx.Done():
			t.Fatalf("%d items of %d came: %v", len(es), n, r.ctx.Err())
		}
	}
	return es
}

// waitPoll waits for the outbox to wait for its next poll (the only wait
// on the clock of these pipelines).
func (r *outboxRun) waitPoll(t *testing.T) {
	t.Helper()
	require.NoError(t, r.clock.BlockUntilContext(r.ctx, 1), "the outbox waits to poll")
}

// drain drains the run and returns the items written that were not
// received yet.
func (r *outboxRun) drain(t *testing.T) []outboxEvent {
	t.Helper()
	require.True(t, r.p.Drain())
	_, err := r.run.Wait()
	require.NoError(t, err)
	var rest []outboxEvent
	for {
		select {
		case e := <-r.got:
			rest = append(rest, e)
		default:
			return rest
		}
	}
}

// ids returns the keys of es.
func outboxIDs(es []outboxEvent) []int64 {
	ks := make([]int64, len(es))
	for i, e := range es {
		ks[i] = e.ID
	}
	return ks
}

// outboxContext is a context that ends with the test, or after a minute
// of real time, so that a test that hangs fails saying where.
func outboxContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
