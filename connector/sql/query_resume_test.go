package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint"
	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A run that fails mid-way saves the position of the last settled row;
// the next run, from the same checkpoint store, reads from the row after
// it: across both, every row is written once, and none is missed.
func TestQueryResumesAfterTheLastSettledRow(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 300)
		store := checkpoint.NewMemory()
		written := map[int64]int{}
		var runs [][]int64
		run := func(failAt int64) error {
			var mine []int64
			defer func() { runs = append(runs, mine) }()
			b := pipeline.New("copy", pipeline.WithCheckpoint(store, time.Hour))
			rows := pipeline.Source(b, "orders", sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 16}))
			pipeline.Sink(b, "store", rows, node.SinkFunc[order](func(_ context.Context, o order) error {
				if o.ID == failAt {
					return errors.New("disk full")
				}
				written[o.ID]++
				mine = append(mine, o.ID)
				return nil
			}))
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(context.Background())
			return err
		}
		require.ErrorContains(t, run(137), "disk full")
		require.NoError(t, run(-1))
		assert.Equal(t, seq(1, 136), runs[0])
		assert.Equal(t, seq(137, 300), runs[1], "the second run starts at the row that failed")
		for id := int64(1); id <= 300; id++ {
			assert.Equal(t, 1, written[id], "order %d", id)
		}
		// A third run has nothing left to read.
		require.NoError(t, run(-1))
		assert.Empty(t, runs[2])
	})
}

// A page that fails (here: the table it reads went away) fails the
// source's Run; node restart runs it again, and it goes on after the last
// row it emitted: no row lost, none twice.
func TestQueryPageFailureRestartedWithoutLossOrDuplicate(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 200)
		gate := gateTable(t, db, table)
		src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{
			From: "SELECT o.* FROM " + table + " o JOIN " + gate + " g ON g.open = 1", Key: []string{"id"}, PageSize: 10})
		obs := &reopener{db: db, d: d, gate: gate}
		// The gate closes as the source emits row 45, in the middle of
		// the page of rows 41 to 50: the next page fails.
		hooked := &hook[order]{Source: src, at: 45, do: func() { closeGate(t, db, gate) }}
		got := runHooked(t, hooked, obs, func(o *resilience.Options) {
			o.NodeRestart.MaxRestarts = 2
			o.NodeRestart.Backoff = resilience.NoBackoff()
		})
		assert.Equal(t, seq(1, 200), ids(got))
		assert.Equal(t, []resilience.RetryKind{resilience.NodeRestart}, obs.kinds())
	})
}

// A source whose first page fails (at Open, counting) is run again by
// node retry.
func TestQueryOpenFailureRetried(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 30)
		gate := gateTable(t, db, table)
		closeGate(t, db, gate)
		src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{
			From: "SELECT o.* FROM " + table + " o JOIN " + gate + " g ON g.open = 1", Key: []string{"id"}, PageSize: 7})
		obs := &reopener{db: db, d: d, gate: gate}
		got := runHooked(t, &hook[order]{Source: src, at: -1}, obs, func(o *resilience.Options) {
			o.NodeRetry.MaxRetries = 2
			o.NodeRetry.Backoff = resilience.NoBackoff()
			o.NodeRetry.Classifier = resilience.AllTransient()
		})
		assert.Equal(t, seq(1, 30), ids(got))
		assert.Equal(t, []resilience.RetryKind{resilience.NodeRetry}, obs.kinds())
		assert.Equal(t, int64(30), src.Size())
	})
}

// gateTable creates a table of one row with open = 1, which a query joins
// to read anything: dropping it makes the query fail.
func gateTable(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	gate := "g" + table[1:]
	_, err := db.Exec("DROP TABLE IF EXISTS " + gate)
	require.NoError(t, err)
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + gate) })
	openGate(t, db, gate)
	return gate
}

func openGate(t testing.TB, db *sql.DB, gate string) {
	_, err := db.Exec("CREATE TABLE " + gate + " (open INTEGER NOT NULL)")
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO " + gate + " (open) VALUES (1)")
	require.NoError(t, err)
}

func closeGate(t testing.TB, db *sql.DB, gate string) {
	_, err := db.Exec("DROP TABLE " + gate)
	require.NoError(t, err)
}

// A reopener is an observer that opens the gate again when the engine
// retries a node, and records the layers that retried.
type reopener struct {
	observer.Nop
	db   *sql.DB
	d    sluicesql.Dialect
	gate string

	mu     sync.Mutex
	layers []resilience.RetryKind
}

func (r *reopener) OnRetry(e observer.RetryEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.layers = append(r.layers, e.Kind)
	if _, err := r.db.Exec("CREATE TABLE " + r.gate + " (open INTEGER NOT NULL)"); err == nil {
		r.db.Exec("INSERT INTO " + r.gate + " (open) VALUES (1)")
	}
}

func (r *reopener) kinds() []resilience.RetryKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]resilience.RetryKind(nil), r.layers...)
}

// A hook is a Query source that calls do once, as it emits its at-th
// item (1-based), in the source's goroutine: a test's way to change the
// database at a known point of the read.
type hook[T any] struct {
	*sluicesql.Source[T]
	at      int
	do      func()
	emitted int
}

func (h *hook[T]) Run(ctx context.Context, out node.Emitter[T]) error {
	return h.Source.Run(ctx, hookEmitter[T]{out, h})
}

type hookEmitter[T any] struct {
	node.Emitter[T]
	h *hook[T]
}

func (e hookEmitter[T]) EmitAt(ctx context.Context, item T, pos []byte) error {
	if err := e.Emitter.EmitAt(ctx, item, pos); err != nil {
		return err
	}
	e.h.emitted++
	if e.h.emitted == e.h.at {
		e.h.do()
	}
	return nil
}

// runHooked runs src into a collector with the source's resilience set by
// res and obs as the observer, and returns what the collector got.
func runHooked[T any](t *testing.T, src *hook[T], obs observer.Observer, res func(*resilience.Options)) []T {
	t.Helper()
	var mu sync.Mutex
	var got []T
	b := pipeline.New("read", pipeline.WithObserver(obs))
	rows := pipeline.Source(b, "query", node.Source[T](src), pipeline.NodeResilience(res))
	pipeline.Sink(b, "collect", rows, node.SinkFunc[T](func(_ context.Context, item T) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, item)
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	return got
}
