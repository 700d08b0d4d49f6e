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
// Each window the Aggregate hands on is one part of a customer-day's
// total, named by its first line in the orders file, and written to
// day_windows with an upsert that replaces the part: a window handed on
// again, whole, after a crash (one written after the checkpoint's last
// save) writes the same part again. A day has more than one part only
// when a drain (or the end of an input that grows later) handed its open
// window on, Partial: the next run's window of that day holds the rows
// read since, with a first line of its own, so it adds to the day rather
// than replacing what the drained run wrote. The window log (the
// checkpoint, an event-time Aggregate with no AllowedLateness and no
// idle timeout) keeps a window written before the last save from being
// written again, rebuilt from the rows a resumed run reads again.
//
// A row dated before the watermark is late: its day was handed on, and
// the Aggregate's Late output takes it (no dead letter: it is a valid
// order). It is upserted by order id into late_orders, so a run that
// reads it again writes the same row.
//
// Whether a row is late depends on the watermark when it comes. With the
// window log, the checkpoint saves the watermark the first row after its
// position was taken with, and the rows reach the Aggregate in the
// file's order (enrich keeps it), so a run resumed after a crash judges
// every row it reads again as the killed run did: a row late before the
// crash is late again, and upserted again by its id. A checkpoint with no
// saved watermark (a bare position, from a version that saved none)
// starts the watermark from the first row read, whatever its date, and a
// row late before may then fall in a window of its day (never the other
// way round: that watermark is never higher). So writing a window also
// takes its orders out of late_orders: each order counts once, in a
// window or as late. Such a window holds no row of the day's part the
// killed run wrote (that part's rows are all before the position), so its
// first line is another, and it adds to that part rather than replacing
// it.
//
// customer_day_totals is a view that sums each customer-day's parts and
// its late orders, so it holds every valid order once, whichever of a
// day's window and its late orders is written first, and however often
// either is written again. (A table, its rows replaced after each write,
// cost a statement per window, about one per order here: 20 000
// customers over 30 days.)

// maxDisorder is how far out of date order the orders may come: a row
// may come after rows of the next day (see row), so the watermark stays a
// day behind the latest date, and a day closes once a row two days
// later came.
const maxDisorder = 24 * time.Hour

// A dayTotal is one window's part of a customer's total of a day: its
// orders, their euro sum, the first line of the orders file it holds,
// which names the part, and its orders' ids, which its write takes out
// of late_orders (see above). The window holds its orders until
// it is handed on anyway, so their ids cost little more.
type dayTotal struct {
	total
	first int64
	ids   []string
}

// addOrder adds o to t. It appends to t's ids in place: the Aggregate
// takes no AllowedLateness, so a window's value is never added to once
// handed on.
func addOrder(t dayTotal, o Order) dayTotal {
	t.Orders++
	t.EURCents += o.EURCents
	if t.first == 0 || o.Line < t.first {
		t.first = o.Line
	}
	t.ids = append(t.ids, o.ID)
	return t
}

// addDays adds the day windows to b: the valid orders' totals per
// customer and day, written to day_windows, and the late orders to
// late_orders; customer_day_totals sums them.
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
CREATE TABLE IF NOT EXISTS day_windows (
	customer   TEXT NOT NULL,
	day        TEXT NOT NULL,
	first_line INTEGER NOT NULL,
	orders     INTEGER NOT NULL,
	eur_cents  INTEGER NOT NULL,
	PRIMARY KEY (customer, day, first_line)
);
CREATE TABLE IF NOT EXISTS late_orders (
	id        TEXT PRIMARY KEY,
	customer  TEXT NOT NULL,
	day       TEXT NOT NULL,
	eur_cents INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS late_orders_day ON late_orders (customer, day);
CREATE VIEW IF NOT EXISTS customer_day_totals (customer, day, orders, eur_cents) AS
SELECT customer, day, sum(n), sum(c) FROM (
	SELECT customer, day, orders AS n, eur_cents AS c FROM day_windows
	UNION ALL
	SELECT customer, day, 1, eur_cents FROM late_orders
) GROUP BY customer, day`

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

// writeDays writes a batch of day windows and takes their orders out of
// late_orders, in one transaction.
func (s *store) writeDays(ctx context.Context, wins []pipeline.Window[string, dayTotal]) []error {
	return s.inTx(ctx, len(wins), func(tx *sql.Tx) error {
		up, err := tx.PrepareContext(ctx, `INSERT INTO day_windows (customer, day, first_line, orders, eur_cents) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (customer, day, first_line) DO UPDATE SET orders = excluded.orders, eur_cents = excluded.eur_cents`)
		if err != nil {
			return err
		}
		var ids []string
		for _, w := range wins {
			day := w.Start.Format(time.DateOnly)
			if _, err := up.ExecContext(ctx, w.Key, day, w.Value.first, w.Value.Orders, w.Value.EURCents); err != nil {
				return err
			}
			ids = append(ids, w.Value.ids...)
		}
		// One statement for the batch's orders, not one per order: the
		// ids go in as a JSON array, looked up by late_orders' key.
		js, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM late_orders WHERE id IN (SELECT value FROM json_each(?))`, string(js)); err != nil {
			return err
		}
		return nil
	})
}

// writeLate writes a batch of late orders in one transaction.
func (s *store) writeLate(ctx context.Context, orders []Order) []error {
	return s.inTx(ctx, len(orders), func(tx *sql.Tx) error {
		up, err := tx.PrepareContext(ctx, `INSERT INTO late_orders (id, customer, day, eur_cents) VALUES (?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET customer = excluded.customer, day = excluded.day, eur_cents = excluded.eur_cents`)
		if err != nil {
			return err
		}
		for _, o := range orders {
			day := o.Date.Format(time.DateOnly)
			if _, err := up.ExecContext(ctx, o.ID, o.Customer, day, o.EURCents); err != nil {
				return err
			}
		}
		return nil
	})
}

// inTx runs write in a transaction and commits; an error fails every
// one of the batch's n items (none is written). The database refuses
// none of these rows unless something is wrong with it.
func (s *store) inTx(ctx context.Context, n int, write func(tx *sql.Tx) error) []error {
	err := func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := write(tx); err != nil {
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
	late     int64 // the rows of late_orders
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
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM customer_day_totals), (SELECT count(*) FROM late_orders)`).Scan(&t.days, &t.late); err != nil {
		return totals{}, err
	}
	if t.days == 0 {
		return t, nil
	}
	err = db.QueryRowContext(ctx, `SELECT customer, day, orders, eur_cents FROM customer_day_totals ORDER BY eur_cents DESC, customer, day LIMIT 1`).
		Scan(&t.top, &t.topDay, &t.topTotal.Orders, &t.topTotal.EURCents)
	return t, err
}
