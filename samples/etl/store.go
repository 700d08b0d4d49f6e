package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// A store loads orders into a SQLite file with connector/sql's upserts,
// so that a second run, or a re-drive of dead letters, loads nothing
// twice: a row that is already there with the same values is left alone
// (SkipUnchanged), and the Upserter counts the rows inserted or changed.
type store struct {
	path string
	db   *sql.DB
	up   *sluicesql.Upserter[orderRow]
}

// An orderRow is an order as the orders table holds it: the day as text,
// 2006-01-02.
type orderRow struct {
	ID       string `db:"id,key"`
	Customer string `db:"customer"`
	Cents    int64  `db:"cents"`
	Currency string `db:"currency"`
	EURCents int64  `db:"eur_cents"`
	Day      string `db:"day"`
}

const schema = `
CREATE TABLE IF NOT EXISTS orders (
	id        TEXT PRIMARY KEY,
	customer  TEXT NOT NULL,
	cents     INTEGER NOT NULL,
	currency  TEXT NOT NULL,
	eur_cents INTEGER NOT NULL,
	day       TEXT NOT NULL
);
DROP TABLE IF EXISTS customer_totals`

// Open opens the database file and creates the tables if needed.
func (s *store) Open(ctx context.Context) error {
	// busy_timeout first: the pragmas run in order, and another
	// connection may hold the file (the summary reads it in one of its
	// own), so switching a new file to WAL must already wait for it
	// instead of failing with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+s.path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return fmt.Errorf("etl: open %s: %w", s.path, err)
	}
	db.SetMaxOpenConns(1) // one writer: SQLite serialises writes anyway
	if err := dropTotalsTable(ctx, db); err != nil {
		db.Close()
		return fmt.Errorf("etl: %s: %w", s.path, err)
	}
	if _, err := db.ExecContext(ctx, schema+";"+daysSchema); err != nil {
		db.Close()
		return fmt.Errorf("etl: create table in %s: %w", s.path, err)
	}
	up, err := sluicesql.NewUpserter[orderRow](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "orders", SkipUnchanged: true})
	if err != nil {
		db.Close()
		return fmt.Errorf("etl: %w", err)
	}
	s.db, s.up = db, up
	return nil
}

// Close closes the database.
func (s *store) Close(context.Context) error {
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// Write upserts a batch of orders, one transaction per batch, and returns
// one error per order as [sluicesql.Upserter.Write] does: nil for each
// row written. A batch the database refuses for a row is split until the
// row is alone, so every other row is written.
func (s *store) Write(ctx context.Context, batch []Order) []error {
	rows := make([]orderRow, len(batch))
	for i, o := range batch {
		rows[i] = orderRow{ID: o.ID, Customer: o.Customer, Cents: o.Cents, Currency: o.Currency, EURCents: o.EURCents, Day: o.Date.Format(time.DateOnly)}
	}
	return s.up.Write(ctx, rows)
}

// changed returns the rows this store's writes inserted or changed.
func (s *store) changed() int64 {
	if s.up == nil {
		return 0
	}
	return s.up.RowsAffected()
}

// A total is one customer's orders of one day: how many, and their sum in
// euro cents.
type total struct {
	Orders   int64
	EURCents int64
}

// clearTables empties the orders table and the totals' tables of the
// database at path (creating them if needed) in one transaction: a run
// that starts over, on another input or the same one, ends with the tables
// a run of its input alone leaves, not with an earlier input's orders
// that the upserts would never remove.
func clearTables(ctx context.Context, path string) error {
	s := &store{path: path}
	if err := s.Open(ctx); err != nil {
		return err
	}
	defer s.Close(ctx)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("etl: clear the tables of %s: %w", path, err)
	}
	defer tx.Rollback()
	for _, table := range []string{"orders", "day_orders"} {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+table); err != nil {
			return fmt.Errorf("etl: clear %s in %s: %w", table, path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("etl: clear the tables of %s: %w", path, err)
	}
	return nil
}

// count returns the number of rows in the table.
func count(ctx context.Context, path string) (int64, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n)
	return n, err
}
