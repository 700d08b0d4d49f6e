package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the SQLite driver, registered as "sqlite"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

type payment struct {
	ID     string // set by the producer: the same in every delivery
	Amount int
}

// chargeOnce runs a pipeline that charges payments through a guard on
// store, and prints what it charged and skipped.
func chargeOnce(store idempotency.Store, payments ...payment) error {
	charge := node.SinkFunc[payment](func(_ context.Context, p payment) error {
		fmt.Println("charged", p.ID, p.Amount)
		return nil
	})
	guarded := idempotency.Sink(charge, store, func(p payment) string { return p.ID },
		idempotency.WithName("charge"))
	b := pipeline.New("payments")
	pipeline.Sink(b, "charge", pipeline.Source(b, "read", pipelinetest.NewSliceSource(payments...)), guarded)
	p, err := b.Build()
	if err != nil {
		return err
	}
	if _, err := p.Run(context.Background()); err != nil {
		return err
	}
	s := guarded.Stats()
	fmt.Println("written", s.Written, "duplicates", s.Duplicates)
	return nil
}

// openStore opens the SQLite database at path, with a busy timeout so
// that concurrent writers wait for its lock, and a Store in it; the table
// is made on first use.
func openStore(path string) (*sql.DB, *sqlstore.Store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, store, nil
}

// A Store keeps completed keys in a SQL table, so that a payment
// redelivered after the program restarted is not charged again. SQLite
// serves one machine; PostgreSQL (sqlstore.Postgres, with the pgx
// driver's database/sql adapter) serves consumers on many.
func Example() {
	dir, err := os.MkdirTemp("", "sqlstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idempotency.db")

	db, store, err := openStore(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = chargeOnce(store, payment{"pay-1", 10}, payment{"pay-2", 25})
	db.Close()
	if err != nil {
		fmt.Println(err)
		return
	}

	// The program restarts, and the broker redelivers pay-2.
	db, store, err = openStore(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := chargeOnce(store, payment{"pay-2", 25}, payment{"pay-3", 5}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// charged pay-1 10
	// charged pay-2 25
	// written 2 duplicates 0
	// charged pay-3 5
	// written 1 duplicates 1
}
