package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/resilience"
)

// today is the fixed "now" of the data set, so that runs repeat exactly.
var today = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

var currencies = []string{"EUR", "USD", "GBP", "CHF", "JPY"}

// An Order is one row of the data set, parsed.
type Order struct {
	ID       string    `json:"id"`
	Customer string    `json:"customer"`
	Cents    int64     `json:"cents"`
	Currency string    `json:"currency"`
	Date     time.Time `json:"date"`
	// EURCents is filled in by the enrich step.
	EURCents int64 `json:"eur_cents,omitempty"`
	// Line is the line of the orders file the row is on, which its dead
	// letter shows.
	Line int64 `json:"line,omitempty"`
}

// CorrelationID names the order in its dead-letter envelope.
func (o Order) CorrelationID() string { return o.ID }

// header is the first line of the orders file: the names of its fields.
const header = "id,customer,amount,currency,date"

// writeOrders writes the data set of rows orders drawn from seed to path
// as CSV (id,customer,amount,currency,date, after a header line), unless
// the file is there already: the file is the job's input, read again by
// every run, and its name says its rows and seed. The rows look like an
// export: they cover the 30 days up to today in the order they were
// entered, so their dates rise through the file, a little out of order
// (see row), and about 0.5 % of them were entered late, dated a week to
// three weeks before the rows around them. About 0.5 % of the rows are
// malformed and about 0.5 % break a business rule, so that every kind of
// failure shows. The file appears whole or not at all: it is written
// beside path and renamed.
func writeOrders(path string, rows int, seed uint64) (written bool, err error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := removeStaleTemps(path); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	w := bufio.NewWriter(tmp)
	w.WriteString(header + "\n")
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	for i := range rows {
		w.WriteString(row(r, i, rows))
		w.WriteByte('\n')
	}
	err = errors.Join(w.Flush(), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return false, fmt.Errorf("etl: write the orders to %s: %w", path, err)
	}
	return true, nil
}

// removeStaleTemps removes the temporary files that writes of path killed
// before their rename left beside it (PATH.NNN.tmp, as os.CreateTemp names
// them): they are never read, and each holds up to a whole data set.
func removeStaleTemps(path string) error {
	dir, base := filepath.Dir(path), filepath.Base(path)+"."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("etl: remove stale temporary files: %w", err)
	}
	for _, e := range entries {
		mid, ok := strings.CutPrefix(e.Name(), base)
		if !ok {
			continue
		}
		if mid, ok = strings.CutSuffix(mid, ".tmp"); !ok || mid == "" || strings.Trim(mid, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("etl: remove a stale temporary file: %w", err)
		}
	}
	return nil
}

// The generated rows' time: row i of n is entered at span*i/n after
// today less 29 days, and dated up to disorder before that (an order
// keyed in hours after it was placed), so a row may come after rows of
// the next day, never of the day after (see maxDisorder). A late row is
// dated lateMin to lateMin+lateSpread before its place.
const (
	span       = 30 * 24 * time.Hour
	disorder   = 6 * time.Hour
	lateMin    = 7 * 24 * time.Hour
	lateSpread = 14 * 24 * time.Hour
)

// row returns row i of n, drawn from r.
func row(r *rand.Rand, i, n int) string {
	id := fmt.Sprintf("ord-%07d", i)
	customer := fmt.Sprintf("cust-%05d", r.IntN(20_000))
	amount := fmt.Sprintf("%d.%02d", 1+r.IntN(2_000), r.IntN(100))
	currency := currencies[r.IntN(len(currencies))]
	at := today.AddDate(0, 0, -29).Add(time.Duration(float64(span) * float64(i) / float64(n)))
	at = at.Add(-time.Duration(r.Int64N(int64(disorder))))
	date := at.Format(time.DateOnly)
	switch p := r.IntN(1000); {
	case p < 2: // a field is missing
		return strings.Join([]string{id, customer, amount, currency}, ",")
	case p < 4:
		amount = "12.5O" // a letter O for a zero
	case p < 5:
		date = "31/02/2026"
	case p < 7:
		amount = "-" + amount // rule: amounts are positive
	case p < 8:
		amount = "2500000.00" // rule: at most 1 000 000 per order
	case p < 9:
		date = today.AddDate(0, 0, 3).Format(time.DateOnly) // rule: not in the future
	case p < 10:
		currency = "XAU" // the rate service does not know it
	case p < 15:
		// Entered late: dated well before the rows around it, behind
		// the day windows' watermark, so the job takes it as late.
		date = at.Add(-lateMin - time.Duration(r.Int64N(int64(lateSpread)))).Format(time.DateOnly)
	}
	return strings.Join([]string{id, customer, amount, currency, date}, ",")
}

// A rowError is a malformed row; it is permanent: parsing again cannot fix
// it.
type rowError struct {
	row, field, why string
}

func (e *rowError) Error() string {
	return fmt.Sprintf("malformed row %q: %s: %s", e.row, e.field, e.why)
}

// parse turns a CSV record into an Order. Malformed rows fail
// permanently, so that they are dead-lettered at once. The source reads
// records of any number of fields, so that a row with a field too few or
// too many is this step's to name, with the rest of its problems.
func parse(_ context.Context, rec file.Record) (Order, error) {
	f := rec.Fields
	line := strings.Join(f, ",")
	if len(f) != 5 {
		return Order{}, resilience.MarkPermanent(&rowError{line, "fields", fmt.Sprintf("want 5, got %d", len(f))})
	}
	cents, err := parseCents(f[2])
	if err != nil {
		return Order{}, resilience.MarkPermanent(&rowError{line, "amount", err.Error()})
	}
	date, err := time.Parse(time.DateOnly, f[4])
	if err != nil {
		return Order{}, resilience.MarkPermanent(&rowError{line, "date", err.Error()})
	}
	return Order{ID: f[0], Customer: f[1], Cents: cents, Currency: f[3], Date: date, Line: rec.Line}, nil
}

func parseCents(s string) (int64, error) {
	whole, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 2 {
		return 0, errors.New("want a decimal with two places")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, err
	}
	c, err := strconv.ParseInt(frac, 10, 64)
	if err != nil || c < 0 {
		return 0, errors.New("bad cents")
	}
	if strings.HasPrefix(whole, "-") {
		return w*100 - c, nil
	}
	return w*100 + c, nil
}

// A ruleError is an order that breaks a business rule.
type ruleError struct {
	rule string
	id   string
}

func (e *ruleError) Error() string { return fmt.Sprintf("order %s breaks rule: %s", e.id, e.rule) }

// maxEURCents is the largest order accepted, in euro cents.
const maxEURCents = 1_000_000 * 100

// validate applies the business rules; a broken rule is permanent.
func validate(_ context.Context, o Order) (Order, error) {
	var rule string
	switch {
	case o.Date.IsZero():
		// Parsed from 0001-01-01: no day to count it on.
		rule = "date must be set"
	case o.Cents <= 0:
		rule = "amount must be positive"
	case o.EURCents > maxEURCents:
		rule = "amount must be at most 1 000 000 EUR"
	case o.Date.After(today):
		rule = "date must not be in the future"
	default:
		return o, nil
	}
	return o, resilience.MarkPermanent(&ruleError{rule: rule, id: o.ID})
}
