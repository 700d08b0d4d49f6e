package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// An order is the row of the tests' orders tables.
type order struct {
	ID   int64   `db:"id"`
	Name string  `db:"name"`
	Qty  *int64  `db:"qty"`
	Note *string `db:"note"`
}

// ph returns the n-th placeholder of d, counted from 1.
func ph(d sluicesql.Dialect, n int) string {
	if d == sluicesql.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// createOrders creates the test's orders table (id, name, qty, note)
// with rows for ids 1..n.
func createOrders(t testing.TB, db *sql.DB, d sluicesql.Dialect, table string, n int) {
	t.Helper()
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, qty BIGINT, note VARCHAR(100))")
	require.NoError(t, err)
	insertOrders(t, db, d, table, 1, n)
}

// insertOrders inserts orders from..to (inclusive) into table, in
// statements of up to 500 rows. Order i has name "order-i" and quantity
// i%7, NULL when that is 0.
func insertOrders(t testing.TB, db *sql.DB, d sluicesql.Dialect, table string, from, to int) {
	t.Helper()
	for lo := from; lo <= to; lo += 500 {
		hi := min(to, lo+499)
		var b strings.Builder
		var args []any
		b.WriteString("INSERT INTO " + table + " (id, name, qty) VALUES ")
		for i := lo; i <= hi; i++ {
			if i > lo {
				b.WriteString(", ")
			}
			n := len(args)
			fmt.Fprintf(&b, "(%s, %s, %s)", ph(d, n+1), ph(d, n+2), ph(d, n+3))
			var qty any
			if i%7 != 0 {
				qty = int64(i % 7)
			}
			args = append(args, int64(i), "order-"+strconv.Itoa(i), qty)
		}
		_, err := db.Exec(b.String(), args...)
		require.NoError(t, err)
	}
}

// readAll runs a pipeline that reads src into a collector and returns
// what it collected.
func readAll[T any](t *testing.T, src *sluicesql.Source[T], opts ...pipeline.Option) []T {
	t.Helper()
	b := pipeline.New("read", opts...)
	rows := pipeline.Source(b, "query", src)
	out := &pipelinetest.Collector[T]{}
	pipeline.Sink(b, "collect", rows, out)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	return out.Items()
}

// ids returns the ids of orders.
func ids(orders []order) []int64 {
	var out []int64
	for _, o := range orders {
		out = append(out, o.ID)
	}
	return out
}

// seq returns from..to.
func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// An emitter collects what a source emits when a test runs it alone,
// with the positions.
type emitter[T any] struct {
	items     []T
	positions [][]byte
	// fail, when set, is returned by EmitAt for the item at that index.
	fail func(i int) error
}

func (e *emitter[T]) Emit(ctx context.Context, item T) error { return e.EmitAt(ctx, item, nil) }

func (e *emitter[T]) EmitTracked(ctx context.Context, item T, done func(node.Outcome)) error {
	err := e.EmitAt(ctx, item, nil)
	if err != nil {
		done(node.Failed)
	} else {
		done(node.Delivered)
	}
	return err
}

func (e *emitter[T]) EmitAt(ctx context.Context, item T, pos []byte) error {
	if e.fail != nil {
		if err := e.fail(len(e.items)); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e.items = append(e.items, item)
	e.positions = append(e.positions, pos)
	return nil
}
