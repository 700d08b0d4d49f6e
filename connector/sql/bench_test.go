package sql_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// benchRows is the size of the benchmarks' table: 100 000 rows, or
// SLUICE_SQL_ROWS.
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_SQL_ROWS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// fillOrders creates table orders in db with rows 1..n as createOrders
// does, in one statement.
func fillOrders(tb testing.TB, db *sql.DB, n int) {
	tb.Helper()
	if _, err := db.Exec("CREATE TABLE orders (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, qty BIGINT, note VARCHAR(100))"); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO orders (id, name, qty)
		WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?)
		SELECT x, 'order-' || x, NULLIF(x % 7, 0) FROM c`, n); err != nil {
		tb.Fatal(err)
	}
}

// A discard is an emitter that drops every item, as a sink that does
// nothing would, after a look at it.
type discard[T any] struct {
	n   int
	ids int64
	id  func(T) int64
}

func (d *discard[T]) Emit(ctx context.Context, item T) error { return d.EmitAt(ctx, item, nil) }
func (d *discard[T]) EmitTracked(ctx context.Context, item T, done func(node.Outcome)) error {
	done(node.Delivered)
	return d.EmitAt(ctx, item, nil)
}

func (d *discard[T]) EmitAt(_ context.Context, item T, _ []byte) error {
	d.n++
	d.ids += d.id(item)
	return nil
}

// BenchmarkQuery reads a SQLite table of benchRows rows in pages of 1000
// into a struct: "source" runs Query's source alone into a discard
// emitter, "pipeline" runs it in a pipeline into a sink that does
// nothing, and "handwritten" is the database/sql keyset loop a program
// would write for the same pages, scanning into the same struct. Each
// reports rows/s.
func BenchmarkQuery(b *testing.B) {
	n := benchRows()
	db := openBenchDB(b)
	fillOrders(b, db, n)
	ctx := context.Background()
	opts := sluicesql.QueryOptions{Table: "orders", Key: []string{"id"}, PageSize: 1000}
	want := int64(n) * int64(n+1) / 2
	check := func(b *testing.B, rows int, ids int64) {
		if rows != n || ids != want {
			b.Fatalf("%d rows, sum of ids %d; want %d, %d", rows, ids, n, want)
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}

	b.Run("handwritten", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rows, ids := handwritten(b, ctx, db, 1000)
			check(b, rows, ids)
		}
		report(b)
	})
	b.Run("source", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out := &discard[order]{id: func(o order) int64 { return o.ID }}
			if err := sluicesql.Query[order](db, sluicesql.SQLite, opts).Run(ctx, out); err != nil {
				b.Fatal(err)
			}
			check(b, out.n, out.ids)
		}
		report(b)
	})
	// interleaved runs the hand-written loop and the source one after
	// the other in each iteration, so that both see the same load on a
	// shared machine, and reports the source's speed as a fraction of
	// the loop's.
	b.Run("interleaved", func(b *testing.B) {
		var hand, src time.Duration
		for b.Loop() {
			start := time.Now()
			rows, ids := handwritten(b, ctx, db, 1000)
			hand += time.Since(start)
			check(b, rows, ids)
			start = time.Now()
			out := &discard[order]{id: func(o order) int64 { return o.ID }}
			if err := sluicesql.Query[order](db, sluicesql.SQLite, opts).Run(ctx, out); err != nil {
				b.Fatal(err)
			}
			src += time.Since(start)
			check(b, out.n, out.ids)
		}
		b.ReportMetric(hand.Seconds()/src.Seconds(), "source/handwritten")
	})
	b.Run("pipeline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var rows int
			var ids int64
			pb := pipeline.New("bench")
			src := pipeline.Source(pb, "orders", sluicesql.Query[order](db, sluicesql.SQLite, opts))
			pipeline.Sink(pb, "discard", src, node.SinkFunc[order](func(_ context.Context, o order) error {
				rows++
				ids += o.ID
				return nil
			}))
			p, err := pb.Build()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Run(ctx); err != nil {
				b.Fatal(err)
			}
			check(b, rows, ids)
		}
		report(b)
	})
}

// handwritten is the keyset loop of database/sql that Query replaces:
// pages of size rows after the last id, each scanned into an order.
func handwritten(b *testing.B, ctx context.Context, db *sql.DB, size int) (n int, ids int64) {
	last := int64(0)
	first := true
	for {
		var rows *sql.Rows
		var err error
		if first {
			rows, err = db.QueryContext(ctx, `SELECT "id", "name", "qty", "note" FROM "orders" ORDER BY "id" LIMIT `+strconv.Itoa(size))
		} else {
			rows, err = db.QueryContext(ctx, `SELECT "id", "name", "qty", "note" FROM "orders" WHERE "id" > ? ORDER BY "id" LIMIT `+strconv.Itoa(size), last)
		}
		if err != nil {
			b.Fatal(err)
		}
		first = false
		page := 0
		for rows.Next() {
			var o order
			if err := rows.Scan(&o.ID, &o.Name, &o.Qty, &o.Note); err != nil {
				b.Fatal(err)
			}
			n++
			ids += o.ID
			last = o.ID
			page++
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if page < size {
			return n, ids
		}
	}
}

// openBenchDB opens a SQLite file of the benchmark's own.
func openBenchDB(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(tb.TempDir(), "bench.db")+"?_pragma=journal_mode(WAL)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
