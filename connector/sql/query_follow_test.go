package sql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A following source reads the rows there are, then, at each interval on
// its clock, the rows inserted since, until the run drains.
func TestQueryFollowsInserts(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 5)
		clock := clockwork.NewFakeClock()
		src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{
			Table: table, Key: []string{"id"}, PageSize: 2, Follow: time.Second, Clock: clock})
		f := startFollowing(t, src)

		assert.Equal(t, seq(1, 5), ids(f.next(t, 5)))
		assert.Equal(t, int64(-1), src.Size(), "a followed table has no size")
		f.waiting(t, clock)
		insertOrders(t, db, d, table, 6, 8)
		clock.Advance(time.Second)
		assert.Equal(t, seq(6, 8), ids(f.next(t, 3)))

		// A poll that finds nothing waits again.
		f.waiting(t, clock)
		clock.Advance(time.Second)
		f.waiting(t, clock)
		insertOrders(t, db, d, table, 9, 9)
		clock.Advance(time.Second)
		assert.Equal(t, []int64{9}, ids(f.next(t, 1)))

		f.waiting(t, clock)
		require.True(t, f.p.Drain())
		_, err := f.run.Wait()
		require.NoError(t, err, "a drain ends the run cleanly")
	})
}

// Cancelling the run's context ends a following source while it waits.
func TestQueryFollowCancelled(t *testing.T) {
	db := openSQLite(t)
	table := tableName(t, db, sluicesql.SQLite)
	createOrders(t, db, sluicesql.SQLite, table, 1)
	clock := clockwork.NewFakeClock()
	src := sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{
		Table: table, Key: []string{"id"}, Follow: time.Minute, Clock: clock})
	f := startFollowing(t, src)
	assert.Equal(t, []int64{1}, ids(f.next(t, 1)))
	f.waiting(t, clock)
	f.cancel()
	_, err := f.run.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// With a watermark, a row updated with a newer watermark is read again,
// after the rows of older watermarks; the key breaks ties.
func TestQueryWatermarkReadsUpdatedRowsAgain(t *testing.T) {
	type item struct {
		ID      int64     `db:"id"`
		Updated time.Time `db:"updated_at"`
		Name    string    `db:"name"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		timeType := map[sluicesql.Dialect]string{sluicesql.SQLite: "DATETIME", sluicesql.Postgres: "TIMESTAMP", sluicesql.MySQL: "DATETIME(6)"}[d]
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, updated_at " + timeType + " NOT NULL, name VARCHAR(20) NOT NULL)")
		require.NoError(t, err)
		t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		put := func(id int64, at time.Time, name string) {
			_, err := db.Exec("INSERT INTO "+table+" (id, updated_at, name) VALUES ("+ph(d, 1)+", "+ph(d, 2)+", "+ph(d, 3)+")", id, at, name)
			require.NoError(t, err)
		}
		put(1, t0, "a")
		put(2, t0, "b") // the same watermark as 1: the key orders them
		put(3, t0.Add(time.Second), "c")

		clock := clockwork.NewFakeClock()
		src := sluicesql.Query[item](db, d, sluicesql.QueryOptions{
			Table: table, Key: []string{"id"}, Watermark: "updated_at", PageSize: 2, Follow: time.Second, Clock: clock})
		f := startFollowing(t, src)
		got := f.next(t, 3)
		assert.Equal(t, []string{"a", "b", "c"}, []string{got[0].Name, got[1].Name, got[2].Name})

		f.waiting(t, clock)
		_, err = db.Exec("UPDATE "+table+" SET updated_at = "+ph(d, 1)+", name = 'a2' WHERE id = 1", t0.Add(time.Minute))
		require.NoError(t, err)
		put(4, t0.Add(2*time.Second), "d")
		clock.Advance(time.Second)
		got = f.next(t, 2)
		assert.Equal(t, "d", got[0].Name)
		assert.Equal(t, int64(1), got[1].ID)
		assert.Equal(t, "a2", got[1].Name)
		assert.True(t, got[1].Updated.Equal(t0.Add(time.Minute)), "%v", got[1].Updated)

		f.waiting(t, clock)
		f.p.Drain()
		_, err = f.run.Wait()
		require.NoError(t, err)
	})
}

// following is a pipeline run that reads a following source into a
// channel.
type following[T any] struct {
	p      *pipeline.Pipeline
	run    *pipelinetest.Running
	items  chan T
	cancel context.CancelFunc
}

func startFollowing[T any](t *testing.T, src *sluicesql.Source[T]) *following[T] {
	t.Helper()
	f := &following[T]{items: make(chan T, 100)}
	b := pipeline.New("follow")
	rows := pipeline.Source(b, "query", src)
	pipeline.Sink(b, "collect", rows, node.SinkFunc[T](func(ctx context.Context, item T) error {
		select {
		case f.items <- item:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	var err error
	f.p, err = b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.run = pipelinetest.Start(ctx, f.p)
	t.Cleanup(func() {
		cancel()
		f.run.Wait()
	})
	return f
}

// next returns the next n items, or fails the test after 10 s.
func (f *following[T]) next(t *testing.T, n int) []T {
	t.Helper()
	var out []T
	guard := time.NewTimer(10 * time.Second)
	defer guard.Stop()
	for range n {
		select {
		case item := <-f.items:
			out = append(out, item)
		case <-f.run.Done():
			_, err := f.run.Wait()
			t.Fatalf("the run ended after %d of %d items: %v", len(out), n, err)
		case <-guard.C:
			t.Fatalf("%d of %d items after 10 s", len(out), n)
		}
	}
	select {
	case item := <-f.items:
		t.Fatalf("one item more than %d: %v", n, item)
	default:
	}
	return out
}

// waiting waits until the source waits on clock for its next poll.
func (f *following[T]) waiting(t *testing.T, clock *clockwork.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
}
