package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// upsertBenchRows is the rows each benchmark writes per iteration: 5,000, or
// SLUICE_SQL_ROWS.
func upsertBenchRows() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_SQL_ROWS")); err == nil && n > 0 {
		return n
	}
	return 5000
}

// benchDB opens a SQLite file with the products table, as the tests open
// it (WAL, synchronous FULL: every commit reaches the disk).
func benchDB(b *testing.B) *sql.DB {
	b.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "bench.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE products (id BIGINT PRIMARY KEY, name VARCHAR(200) NULL, qty INTEGER NOT NULL, CONSTRAINT qty_nonneg CHECK (qty >= 0))"); err != nil {
		b.Fatal(err)
	}
	return db
}

const benchUpsert = `INSERT INTO products (id, name, qty) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET name = excluded.name, qty = excluded.qty`

// BenchmarkUpsert measures rows per second written to SQLite by an
// Upsert pipeline (batches of 500, one transaction each) beside two
// hand-written database/sql loops doing the same upserts: one row per
// transaction, as a row-at-a-time sink does, and 500 rows per
// transaction in one multi-row statement, as a careful hand-written batch
// loop does.
func BenchmarkUpsert(b *testing.B) {
	n := upsertBenchRows()
	items := products(n)
	ctx := context.Background()
	perSec := func(b *testing.B) {
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}

	b.Run("pipeline", func(b *testing.B) {
		db := benchDB(b)
		b.ReportAllocs()
		for b.Loop() {
			p := upsertPipeline(db, items, 500)
			if _, err := p.Run(ctx); err != nil {
				b.Fatal(err)
			}
		}
		perSec(b)
	})

	// One row in 1,000 breaks the CHECK constraint: the pipeline splits
	// each batch that holds one (about 2 log2(500) more transactions) and
	// dead-letters the row, beside a hand-written batch loop that, when a
	// batch fails, writes that batch's rows one transaction each and skips
	// the ones that fail.
	bad := badEveryThousand(n)
	b.Run("pipeline-bad-1-in-1000", func(b *testing.B) {
		db := benchDB(b)
		b.ReportAllocs()
		for b.Loop() {
			dlq := deadletter.NewMemory(len(bad) + 1)
			p := upsertPipeline(db, bad, 500, pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.DeadLetter
			}))
			if _, err := p.Run(ctx); err != nil {
				b.Fatal(err)
			}
			if got := len(dlq.Envelopes()); got != (n+999)/1000 {
				b.Fatalf("%d dead letters", got)
			}
		}
		perSec(b)
	})

	b.Run("hand-batch-bad-1-in-1000", func(b *testing.B) {
		db := benchDB(b)
		b.ReportAllocs()
		for b.Loop() {
			failed := handBatches(b, ctx, db, bad, 500)
			if failed != (n+999)/1000 {
				b.Fatalf("%d rows failed", failed)
			}
		}
		perSec(b)
	})

	b.Run("hand-row-at-a-time", func(b *testing.B) {
		db := benchDB(b)
		b.ReportAllocs()
		for b.Loop() {
			for _, it := range items {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, benchUpsert, it.ID, it.Name, it.Qty); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		perSec(b)
	})

	b.Run("hand-batch", func(b *testing.B) {
		db := benchDB(b)
		b.ReportAllocs()
		const batch = 500
		stmt := strings.Replace(benchUpsert, "(?, ?, ?)", strings.Repeat("(?, ?, ?), ", batch-1)+"(?, ?, ?)", 1)
		for b.Loop() {
			for start := 0; start < len(items); start += batch {
				chunk := items[start:min(start+batch, len(items))]
				q := stmt
				if len(chunk) < batch {
					q = strings.Replace(benchUpsert, "(?, ?, ?)", strings.Repeat("(?, ?, ?), ", len(chunk)-1)+"(?, ?, ?)", 1)
				}
				args := make([]any, 0, 3*len(chunk))
				for _, it := range chunk {
					args = append(args, it.ID, it.Name, it.Qty)
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, q, args...); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		perSec(b)
	})
}

// badEveryThousand returns n products of which rows 499, 1499, ... break
// the CHECK constraint: one in 1,000, in the middle of every other batch
// of 500.
func badEveryThousand(n int) []product {
	var bad []int
	for i := 499; i < n; i += 1000 {
		bad = append(bad, i)
	}
	return products(n, bad...)
}

// handBatches writes items in transactions of batch rows, one multi-row
// statement each, as a careful hand-written loop does, and when a batch
// fails writes its rows one transaction each, skipping those that fail:
// it returns how many did.
func handBatches(b *testing.B, ctx context.Context, db *sql.DB, items []product, batch int) (failed int) {
	stmt := func(rows int) string {
		return strings.Replace(benchUpsert, "(?, ?, ?)", strings.Repeat("(?, ?, ?), ", rows-1)+"(?, ?, ?)", 1)
	}
	full := stmt(batch)
	write := func(q string, rows []product) error {
		args := make([]any, 0, 3*len(rows))
		for _, it := range rows {
			args = append(args, it.ID, it.Name, it.Qty)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	for start := 0; start < len(items); start += batch {
		chunk := items[start:min(start+batch, len(items))]
		q := full
		if len(chunk) < batch {
			q = stmt(len(chunk))
		}
		if write(q, chunk) == nil {
			continue
		}
		for i := range chunk {
			if write(benchUpsert, chunk[i:i+1]) != nil {
				failed++
			}
		}
	}
	return failed
}

// upsertPipeline reads items from a slice and upserts them into the
// products table in batches of batch rows.
func upsertPipeline(db *sql.DB, items []product, batch int, opts ...pipeline.Option) *pipeline.Pipeline {
	b := pipeline.New("bench", opts...)
	in := pipeline.Source(b, "read", pipelinetest.NewSliceSource(items...))
	sluicesql.Upsert(b, "store", in, db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "products", BatchSize: batch})
	p, err := b.Build()
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return p
}
