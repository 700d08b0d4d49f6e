package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A message is a row of the outbox table.
type message struct {
	ID      int64  `db:"id"`
	Topic   string `db:"topic"`
	Payload string `db:"payload"`
}

// An outbox source publishes the rows a service committed to its outbox
// table, and deletes each once its item was delivered. This pipeline
// drains once it published the three rows; a service's runs until it is
// stopped, polling for new rows.
func ExampleOutbox() {
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	// WAL and a busy timeout: the outbox reads pages on one connection
	// while it deletes on another, which SQLite's default journal would
	// refuse at once with "database is locked" (SQLITE_BUSY).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	// The service writes its order and the message in one transaction.
	// AUTOINCREMENT: SQLite never gives a key twice (Open refuses a table
	// without it).
	_, err = db.Exec(`CREATE TABLE outbox (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		topic TEXT NOT NULL,
		payload TEXT NOT NULL)`)
	if err != nil {
		panic(err)
	}
	for _, order := range []string{"A-1", "A-2", "A-3"} {
		tx, _ := db.Begin()
		// ... INSERT INTO orders ...
		tx.Exec(`INSERT INTO outbox (topic, payload) VALUES ('order.created', ?)`, order)
		if err := tx.Commit(); err != nil {
			panic(err)
		}
	}

	src := sluicesql.Outbox[message](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox"})
	var p *pipeline.Pipeline
	published := 0
	b := pipeline.New("publish")
	messages := pipeline.Source(b, "outbox", node.Source[message](src))
	pipeline.Sink(b, "broker", messages, node.SinkFunc[message](func(_ context.Context, m message) error {
		// A real sink publishes to a broker, with m.ID as the message's
		// id, so that the consumers drop a message sent twice.
		fmt.Println("publish", m.ID, m.Topic, m.Payload)
		if published++; published == 3 {
			p.Drain()
		}
		return nil
	}))
	if p, err = b.Build(); err != nil {
		panic(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		panic(err)
	}

	var left int
	db.QueryRow(`SELECT COUNT(*) FROM outbox`).Scan(&left)
	fmt.Println("rows left:", left)
	// Output:
	// publish 1 order.created A-1
	// publish 2 order.created A-2
	// publish 3 order.created A-3
	// rows left: 0
}
