package main

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A run resumed from a checkpoint that saved no watermark (a bare
// position, as a version before the watermarks were saved wrote), just
// before a row that an earlier run took as late, reads that row first,
// and its watermark starts there: the row is not late this time, and
// falls in a window of its own. It is counted once, in the window, not
// late now; the totals still equal a GROUP BY over the orders.
func TestResumeAtALateRowCountsItOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows, cfg.failRate, cfg.outage = 1000, 0, 0
	s := runOnFakeClock(t, cfg)
	late := lateOrders(t, cfg.db)
	require.NotEmpty(t, late)

	// The first late row's line, and the position just before it.
	first, before := firstLate(t, s.cfg.input, late)
	cp, err := checkpoint.OpenFile(s.cfg.checkpoint)
	require.NoError(t, err)
	require.NoError(t, cp.Save(t.Context(), pipelineName, "read", before.pos))
	require.NoError(t, cp.Close())

	again := runOnFakeClock(t, cfg)
	assert.Equal(t, before.row, again.at.after, "resumed right before the late row")
	assert.Equal(t, s.at.of-before.row, again.read())
	assertTotalsMatchOrders(t, cfg.db)
	want := maps.Clone(late)
	delete(want, first)
	assert.Equal(t, want, lateOrders(t, cfg.db), "the late row counts in its window now, not as late")
	assert.Equal(t, int64(len(want)), again.totals.late)
	assert.Equal(t, int64(len(want)), again.node("days").Late, "the later late rows are late again")
	assert.Equal(t, s.totals.days, again.totals.days)
}

// A position is a place in the orders file: after row (1 for the
// first), as the source gives it.
type position struct {
	row int64
	pos []byte
}

// firstLate returns the id of the first row of the orders file at path
// whose id late holds, and the position just before it.
func firstLate(t *testing.T, path string, late map[string]bool) (string, position) {
	t.Helper()
	src := file.CSV(path, file.CSVOptions{Header: true, FieldsPerRecord: -1})
	require.NoError(t, src.Open(t.Context()))
	defer src.Close(t.Context())
	em := &positions{late: late}
	err := src.Run(t.Context(), em)
	require.ErrorIs(t, err, errFound)
	require.NotEmpty(t, em.id)
	return em.id, em.before
}

var errFound = errors.New("found")

// positions is an emitter that follows the source's positions until a
// row late holds.
type positions struct {
	late   map[string]bool
	before position
	id     string
}

func (p *positions) Emit(context.Context, file.Record) error { return errors.New("want EmitAt") }
func (p *positions) EmitTracked(context.Context, file.Record, func(node.Outcome)) error {
	return errors.New("want EmitAt")
}

func (p *positions) EmitAt(_ context.Context, rec file.Record, pos []byte) error {
	if len(rec.Fields) > 0 && p.late[rec.Fields[0]] {
		p.id = rec.Fields[0]
		return errFound
	}
	p.before = position{row: p.before.row + 1, pos: slices.Clone(pos)}
	return nil
}

// validate sends an order dated 0001-01-01, the zero time, to the dead
// letters with a rule of its own, rather than to a day window, where it
// would be thousands of years late.
func TestValidateRejectsTheZeroDate(t *testing.T) {
	t.Parallel()
	o, err := parse(t.Context(), file.Record{Fields: []string{"ord-1", "cust-1", "1.00", "EUR", "0001-01-01"}})
	require.NoError(t, err)
	require.True(t, o.Date.IsZero())
	_, err = validate(t.Context(), o)
	var rule *ruleError
	require.ErrorAs(t, err, &rule)
	assert.Equal(t, "date must be set", rule.rule)

	o.Date = today.Add(-time.Hour)
	_, err = validate(t.Context(), o)
	assert.NoError(t, err)
}

// customer_day_totals counts each order once, by its id, whichever of a
// day's windows and its late orders is written first, and however often
// any of them is written again: a window written again after a crash, a
// day a drain cut in two, a late order let into a window by a resumed
// run, a window of the resumed run that lacks an order the killed run's
// had (failed the second time), and an order id repeated in the batch.
func TestDayOrdersCountOnce(t *testing.T) {
	t.Parallel()
	st := &store{path: filepath.Join(t.TempDir(), "orders.db")}
	require.NoError(t, st.Open(t.Context()))
	defer st.Close(t.Context())
	day := time.Date(2026, 10, 12, 0, 0, 0, 0, time.UTC)
	window := func(orders ...dayOrder) pipeline.Window[string, dayTotal] {
		v := dayTotal{orders: orders}
		for _, o := range orders {
			v.Orders++
			v.EURCents += o.EURCents
		}
		return pipeline.Window[string, dayTotal]{Key: "cust-1", Start: day, End: day.Add(24 * time.Hour), Count: len(orders), Value: v}
	}
	late := Order{ID: "ord-9", Customer: "cust-1", Date: day, EURCents: 7, Line: 900}
	write := func(wins ...pipeline.Window[string, dayTotal]) {
		t.Helper()
		errs := st.writeDays(t.Context(), wins)
		require.Len(t, errs, len(wins))
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	writeLate := func(o Order) {
		t.Helper()
		for _, err := range st.writeLate(t.Context(), []Order{o}) {
			require.NoError(t, err)
		}
	}
	totalOf := func() total {
		t.Helper()
		var got total
		require.NoError(t, st.db.QueryRowContext(t.Context(), `SELECT orders, eur_cents FROM customer_day_totals WHERE customer = 'cust-1' AND day = '2026-10-12'`).
			Scan(&got.Orders, &got.EURCents))
		return got
	}
	lateRows := func() int {
		t.Helper()
		var n int
		require.NoError(t, st.db.QueryRowContext(t.Context(), `SELECT count(*) FROM day_orders WHERE late`).Scan(&n))
		return n
	}

	write()         // an empty batch writes nothing, and fails nothing
	writeLate(late) // before any window of its day
	assert.Equal(t, total{1, 7}, totalOf())
	assert.Equal(t, 1, lateRows())
	write(window(dayOrder{"ord-1", 60}, dayOrder{"ord-2", 40})) // the day's window
	assert.Equal(t, total{3, 107}, totalOf())
	write(window(dayOrder{"ord-1", 60}, dayOrder{"ord-2", 40})) // written again after a crash
	writeLate(late)                                             // and the late order too
	assert.Equal(t, total{3, 107}, totalOf())
	write(window(dayOrder{"ord-5", 30})) // the rest of a day a drain cut
	assert.Equal(t, total{4, 137}, totalOf())
	// A resumed run's window of the day lacks ord-1 (it failed this
	// time, and keeps the row the killed run's load wrote), and holds the
	// late order, which its watermark let in.
	write(window(dayOrder{"ord-2", 40}, dayOrder{"ord-9", 7}))
	assert.Equal(t, total{4, 137}, totalOf())
	assert.Zero(t, lateRows(), "counted in its window now")
	// Two windows of a batch with the same order: one row.
	write(window(dayOrder{"ord-6", 1}), window(dayOrder{"ord-6", 1}))
	assert.Equal(t, total{5, 138}, totalOf())
}
