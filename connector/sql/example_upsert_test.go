package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Upsert writes stock levels to SQLite in one batch; the row that breaks
// the CHECK constraint is dead-lettered alone, naming it, and the others
// are written.
func ExampleUpsert() {
	type stock struct {
		SKU string `db:"sku,key"`
		Qty int    `db:"qty"`
	}
	dir, _ := os.MkdirTemp("", "upsert")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "shop.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL,
		CONSTRAINT qty_nonneg CHECK (qty >= 0))`); err != nil {
		fmt.Println(err)
		return
	}

	dlq := deadletter.NewMemory(10)
	b := pipeline.New("stock", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
	}))
	levels := pipeline.Source(b, "read", pipelinetest.NewSliceSource(
		stock{"apple", 3}, stock{"pear", -1}, stock{"plum", 5}, stock{"apple", 4}))
	sluicesql.Upsert(b, "store", levels, db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "stock"})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	rows, err := db.Query("SELECT sku, qty FROM stock ORDER BY sku")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var s stock
		_ = rows.Scan(&s.SKU, &s.Qty)
		fmt.Println(s.SKU, s.Qty)
	}
	for _, e := range dlq.Envelopes() {
		var re *sluicesql.RowError
		if errors.As(e.Err, &re) {
			fmt.Println("dead letter:", e.Item, re.Constraint, re.Code)
		}
	}
	// Output:
	// apple 4
	// plum 5
	// dead letter: {pear -1} qty_nonneg SQLITE_CONSTRAINT_CHECK
}
