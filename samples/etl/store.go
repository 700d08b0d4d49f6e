package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// A store loads batches of orders into a SQLite file with upserts, so that
// a second run, or a re-drive of dead letters, loads nothing twice: a row
// that is already there with the same values is left alone.
type store struct {
	path    string
	db      *sql.DB
	changed atomic.Int64 // rows inserted or changed by this run
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
CREATE TABLE IF NOT EXISTS customer_totals (
	customer  TEXT PRIMARY KEY,
	orders    INTEGER NOT NULL,
	eur_cents INTEGER NOT NULL
)`

const upsert = `
INSERT INTO orders (id, customer, cents, currency, eur_cents, day) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
	customer = excluded.customer, cents = excluded.cents, currency = excluded.currency,
	eur_cents = excluded.eur_cents, day = excluded.day
WHERE (customer, cents, currency, eur_cents, day) IS NOT
	(excluded.customer, excluded.cents, excluded.currency, excluded.eur_cents, excluded.day)`

// Open opens the database file and creates the table if needed.
func (s *store) Open(ctx context.Context) error {
	// busy_timeout first: the pragmas run in order, and another
	// connection may hold the file (the totals are summed in one of their
	// own), so switching a new file to WAL must already wait for it
	// instead of failing with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+s.path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return fmt.Errorf("etl: open %s: %w", s.path, err)
	}
	db.SetMaxOpenConns(1) // one writer: SQLite serialises writes anyway
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return fmt.Errorf("etl: create table in %s: %w", s.path, err)
	}
	s.db = db
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

// Write loads one batch in one transaction. A failure rolls the whole batch
// back, so that a retry of the batch cannot half-load it.
func (s *store) Write(ctx context.Context, batch []Order) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("etl: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, upsert)
	if err != nil {
		return fmt.Errorf("etl: prepare: %w", err)
	}
	defer stmt.Close()
	var changed int64
	for _, o := range batch {
		res, err := stmt.ExecContext(ctx, o.ID, o.Customer, o.Cents, o.Currency, o.EURCents, o.Date.Format("2006-01-02"))
		if err != nil {
			return fmt.Errorf("etl: upsert order %s: %w", o.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("etl: upsert order %s: %w", o.ID, err)
		}
		changed += n
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("etl: commit: %w", err)
	}
	s.changed.Add(changed)
	return nil
}

// A total is one customer's orders: how many, and their sum in euro
// cents.
type total struct {
	Orders   int64
	EURCents int64
}

// totals are the customers' totals as the run left them: how many
// customers, and the largest.
type totals struct {
	customers int64
	top       string // the customer with the largest euro total
	topTotal  total
}

// sumTotals computes each customer's order count and euro total from the
// orders table into customer_totals, in one transaction that replaces the
// table's rows. It reads the table as it is, whatever runs loaded it, so
// that the totals are right after a resume as after one whole run, and a
// second call changes nothing.
func sumTotals(ctx context.Context, path string) (totals, error) {
	s := &store{path: path}
	if err := s.Open(ctx); err != nil {
		return totals{}, err
	}
	defer s.Close(ctx)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return totals{}, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM customer_totals`); err != nil {
		return totals{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO customer_totals (customer, orders, eur_cents)
SELECT customer, count(*), sum(eur_cents) FROM orders GROUP BY customer`); err != nil {
		return totals{}, err
	}
	if err := tx.Commit(); err != nil {
		return totals{}, err
	}
	var t totals
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM customer_totals`).Scan(&t.customers); err != nil {
		return totals{}, err
	}
	if t.customers == 0 {
		return t, nil
	}
	err = s.db.QueryRowContext(ctx, `SELECT customer, orders, eur_cents FROM customer_totals ORDER BY eur_cents DESC, customer LIMIT 1`).
		Scan(&t.top, &t.topTotal.Orders, &t.topTotal.EURCents)
	return t, err
}

// clearTables empties the orders and customer_totals tables of the
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
	for _, table := range []string{"orders", "customer_totals"} {
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
