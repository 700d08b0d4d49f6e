package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pipeline"
)

// The customers' totals per day, by the order's own date, are summed in
// the pipeline: an event-time Aggregate keyed by customer cuts the valid
// orders into windows of a day on their Date, and closes a day once its
// watermark, the latest date taken in less maxDisorder, passed it.
//
// Each window the Aggregate hands on is written, in one statement per
// batch, as its orders: a row of day_orders per order, upserted by the
// order's id, and customer_day_totals is a view that counts and sums
// day_orders by customer and day. So an order counts once, by its id,
// however often it is written and in whichever way: a window handed on
// again, whole, after a crash (one written after the checkpoint's last
// save) writes the same rows again; a drain hands the open days on
// Partial, and the next run's window of that day adds the rows read
// since; an order written by a killed run and failed by the resumed one
// (a dependency that answers otherwise the second time) keeps its row,
// as it keeps its row of the orders table, which the load wrote. The
// window log (the checkpoint, an event-time Aggregate with no
// AllowedLateness and no idle timeout) keeps a window written before the
// last save from being written again, rebuilt from the rows a resumed
// run reads again. (A row per window, replaced when written again, would
// count an order twice or lose it when a resumed run's window of the day
// holds other orders than the killed run's did; and a table of totals
// rewritten after each write cost a statement per window, about one per
// order here: 20 000 customers over 30 days.)
//
// A row dated before the watermark is late: its day was handed on, and
// the Aggregate's Late output takes it (no dead letter: it is a valid
// order). It is upserted into day_orders by its id too, marked late.
//
// Whether a row is late depends on the watermark when it comes. With the
// window log, the checkpoint saves the watermark the first row after its
// position was taken with, and the rows reach the Aggregate in the
// file's order (enrich keeps it), so a run resumed after a crash judges
// every row it reads again as the killed run did. A checkpoint with no
// saved watermark (a bare position, from a version that saved none)
// starts the watermark from the first row read, whatever its date, and a
// row late before may then fall in a window of its day: its row is
// upserted again, not late now, and it still counts once.
//
// What the window log cannot see: an order that failed before the
// Aggregate in a killed run (dead-lettered after its retries) and passes
// in the resumed one, in a day the log holds as written, is loaded into
// orders but settles Filtered at the Aggregate, in no total
// (docs/checkpoint-demo.md says so).

// maxDisorder is how far out of date order the orders may come: a row
// may come after rows of the next day (see row), so the watermark stays a
// day behind the latest date, and a day closes once a row two days
// later came.
const maxDisorder = 24 * time.Hour

// A dayTotal is one window's orders of a customer's day: their count
// and euro sum, and each order's id and euro amount, which its write
// upserts into day_orders. The window holds its orders until it is
// handed on anyway, so keeping them costs little more.
type dayTotal struct {
	total
	orders []dayOrder
}

type dayOrder struct {
	ID       string
	EURCents int64
}

// addOrder adds o to t. It appends to t's orders in place: the Aggregate
// takes no AllowedLateness, so a window's value is never added to once
// handed on.
func addOrder(t dayTotal, o Order) dayTotal {
	t.Orders++
	t.EURCents += o.EURCents
	t.orders = append(t.orders, dayOrder{o.ID, o.EURCents})
	return t
}

// addDays adds the day windows to b: the valid orders per customer and
// day, and the late orders, written to day_orders, which
// customer_day_totals sums.
func addDays(b *pipeline.Builder, valid pipeline.Stream[Order], st *store, opts ...pipeline.NodeOption) {
	var late pipeline.Stream[Order]
	days := pipeline.Aggregate(b, "days", valid, func(o Order) string { return o.Customer },
		pipeline.TimeWindow(24*time.Hour), func() dayTotal { return dayTotal{} }, addOrder,
		// No idle timeout: the input is a file, and its end closes the
		// open days; the idle timeout would also turn off the window log.
		pipeline.EventTime(func(o Order) time.Time { return o.Date }, maxDisorder, 0),
		pipeline.Late(&late))
	pipeline.ForEachBatch(b, "totals", days, 500, 250*time.Millisecond, st.writeDays, opts...)
	pipeline.ForEachBatch(b, "late", late, 500, 250*time.Millisecond, st.writeLate, opts...)
}

const daysSchema = `
CREATE TABLE IF NOT EXISTS day_orders (
	id        TEXT PRIMARY KEY,
	customer  TEXT NOT NULL,
	day       TEXT NOT NULL,
	eur_cents INTEGER NOT NULL,
	late      INTEGER NOT NULL
);
CREATE VIEW IF NOT EXISTS customer_day_totals (customer, day, orders, eur_cents) AS
SELECT customer, day, count(*), sum(eur_cents) FROM day_orders GROUP BY customer, day`

// upsertDayOrders upserts a batch of day_orders rows, given as a JSON
// array of [id, customer, day, eur_cents, late] arrays: one statement
// for the batch, not one per order.
const upsertDayOrders = `INSERT INTO day_orders (id, customer, day, eur_cents, late)
SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 FROM json_each(?) WHERE true
ON CONFLICT (id) DO UPDATE SET customer = excluded.customer, day = excluded.day, eur_cents = excluded.eur_cents, late = excluded.late`

// dropTotalsTable drops customer_day_totals where it is a table, as
// versions before the view made it, so that the view can take its name.
func dropTotalsTable(ctx context.Context, db *sql.DB) error {
	var kind string
	err := db.QueryRowContext(ctx, `SELECT type FROM sqlite_master WHERE name = 'customer_day_totals'`).Scan(&kind)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && kind != "table") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the schema: %w", err)
	}
	if _, err := db.ExecContext(ctx, `DROP TABLE customer_day_totals`); err != nil {
		return fmt.Errorf("drop the old customer_day_totals table: %w", err)
	}
	return nil
}

// writeDays writes the orders of a batch of day windows, in one
// transaction.
func (s *store) writeDays(ctx context.Context, wins []pipeline.Window[string, dayTotal]) []error {
	var rows [][]any
	for _, w := range wins {
		day := w.Start.Format(time.DateOnly)
		for _, o := range w.Value.orders {
			rows = append(rows, []any{o.ID, w.Key, day, o.EURCents, 0})
		}
	}
	return s.upsertDays(ctx, len(wins), rows)
}

// writeLate writes a batch of late orders in one transaction.
func (s *store) writeLate(ctx context.Context, orders []Order) []error {
	rows := make([][]any, 0, len(orders))
	for _, o := range orders {
		rows = append(rows, []any{o.ID, o.Customer, o.Date.Format(time.DateOnly), o.EURCents, 1})
	}
	return s.upsertDays(ctx, len(orders), rows)
}

// upsertDays upserts rows into day_orders in one transaction; an error
// fails every one of the batch's n items (none is written). The database
// refuses none of these rows unless something is wrong with it.
func (s *store) upsertDays(ctx context.Context, n int, rows [][]any) []error {
	err := func() error {
		js, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, upsertDayOrders, string(js)); err != nil {
			return err
		}
		return tx.Commit()
	}()
	errs := make([]error, n)
	if err != nil {
		err = fmt.Errorf("etl: write the customers' totals: %w", err)
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// totals are the customers' totals per day as the run left them: how many
// customer-days, the largest, and how many orders came late.
type totals struct {
	days     int64  // customer-days: the rows of customer_day_totals
	top      string // the customer with the largest euro total of a day
	topDay   string // that day
	topTotal total
	late     int64 // the late rows of day_orders
}

// readTotals reads what the summary says of the totals from the database
// at path.
func readTotals(ctx context.Context, path string) (totals, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return totals{}, err
	}
	defer db.Close()
	var t totals
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM customer_day_totals), (SELECT count(*) FROM day_orders WHERE late)`).Scan(&t.days, &t.late); err != nil {
		return totals{}, err
	}
	if t.days == 0 {
		return t, nil
	}
	err = db.QueryRowContext(ctx, `SELECT customer, day, orders, eur_cents FROM customer_day_totals ORDER BY eur_cents DESC, customer, day LIMIT 1`).
		Scan(&t.top, &t.topDay, &t.topTotal.Orders, &t.topTotal.EURCents)
	return t, err
}
