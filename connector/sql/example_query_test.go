package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// An Order is a row of the examples' orders table.
type Order struct {
	ID  int64  `db:"id"`
	SKU string `db:"sku"`
	Qty int    `db:"qty"`
}

// exampleDB opens a SQLite file in a new directory, with an orders table
// of n rows, and returns it with a function that removes it.
func exampleDB(n int) (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "sluice-sql-example")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL)"); err != nil {
		panic(err)
	}
	addOrders(db, 1, n)
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

func addOrders(db *sql.DB, from, to int) {
	for i := from; i <= to; i++ {
		if _, err := db.Exec("INSERT INTO orders (id, sku, qty) VALUES (?, ?, ?)", i, fmt.Sprintf("sku-%d", i*7), i%3+1); err != nil {
			panic(err)
		}
	}
}

// Query reads a table in pages of its key into a pipeline.
func ExampleQuery() {
	db, done := exampleDB(5)
	defer done()

	b := pipeline.New("orders")
	orders := pipeline.Source(b, "read", sluicesql.Query[Order](db, sluicesql.SQLite, sluicesql.QueryOptions{
		Table:    "orders",
		Key:      []string{"id"},
		Where:    "qty > ?",
		Args:     []any{1},
		PageSize: 2,
	}))
	pipeline.Sink(b, "print", orders, node.SinkFunc[Order](func(_ context.Context, o Order) error {
		fmt.Println(o.ID, o.SKU, o.Qty)
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 1 sku-7 2
	// 2 sku-14 3
	// 4 sku-28 2
	// 5 sku-35 3
}

// With a checkpoint store, each run reads the rows after the last one
// the run before settled: here, the rows added since.
func ExampleQuery_resume() {
	db, done := exampleDB(3)
	defer done()
	store := checkpoint.NewMemory() // checkpoint.OpenFile or checkpoint/sqlstore to outlive the process

	b := pipeline.New("orders", pipeline.WithCheckpoint(store, time.Second))
	orders := pipeline.Source(b, "read", sluicesql.Query[Order](db, sluicesql.SQLite, sluicesql.QueryOptions{
		Table: "orders", Key: []string{"id"},
	}))
	pipeline.Sink(b, "print", orders, node.SinkFunc[Order](func(_ context.Context, o Order) error {
		fmt.Println("order", o.ID)
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	for run := 1; run <= 2; run++ {
		fmt.Println("run", run)
		if _, err := p.Run(context.Background()); err != nil {
			fmt.Println(err)
		}
		if run == 1 {
			addOrders(db, 4, 5) // rows committed between the runs
		}
	}
	// Output:
	// run 1
	// order 1
	// order 2
	// order 3
	// run 2
	// order 4
	// order 5
}
