package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// totalsVsOrders returns a GROUP BY over the orders table and
// customer_day_totals, in the same order.
func totalsVsOrders(t *testing.T, path string) (want, got []string) {
	t.Helper()
	want = dump(t, path, "SELECT customer, day, count(*), sum(eur_cents) FROM orders GROUP BY customer, day ORDER BY 1, 2")
	got = dump(t, path, "SELECT customer, day, orders, eur_cents FROM customer_day_totals ORDER BY 1, 2")
	return want, got
}

// writeInput writes an orders file of rows, after the header, in dir.
func writeInput(t *testing.T, dir string, rows ...string) string {
	t.Helper()
	path := filepath.Join(dir, "input.csv")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(append([]string{header}, rows...), "\n")+"\n"), 0o644))
	return path
}

// The totals hold each order once however small the input, and a run
// again on the same file (nothing to read) keeps them: an empty file, one
// row, a late row after the day it belongs to closed, only malformed rows.
func TestTotalsAtTheEdgesOfSize(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"empty":   nil,
		"one row": {"ord-1,cust-1,10.00,EUR,2026-10-10"},
		"late":    {"ord-1,cust-1,10.00,EUR,2026-10-20", "ord-2,cust-2,10.00,EUR,2026-10-01"},
		"malformed only": {
			"ord-1,cust-1,10.00,EUR",
			"ord-2,cust-1,12.5O,EUR,2026-10-10",
			"ord-3,cust-1,10.00,EUR,31/02/2026",
		},
	}
	for name, rows := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			cfg.failRate, cfg.outage = 0, 0
			cfg.input = writeInput(t, filepath.Dir(cfg.db), rows...)
			for run := range 2 {
				s := runOnFakeClock(t, cfg)
				want, got := totalsVsOrders(t, cfg.db)
				assert.Equal(t, want, got, "run %d", run)
				assert.Equal(t, int64(len(want)), s.totals.days, "run %d", run)
				if name == "late" {
					assert.Equal(t, int64(1), s.totals.late, "run %d: ord-2 came a day after 2026-10-20's rows", run)
				}
			}
		})
	}
}

// An order id twice in the file (an order entered again with a corrected
// amount) is one row of orders, the later one, and counts once in the
// totals, with the later amount.
func TestRepeatedOrderIDCountsOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.failRate, cfg.outage = 0, 0
	cfg.input = writeInput(t, filepath.Dir(cfg.db),
		"ord-1,cust-1,10.00,EUR,2026-10-10",
		"ord-2,cust-2,10.00,EUR,2026-10-11",
		"ord-1,cust-1,12.00,EUR,2026-10-10",
		"ord-3,cust-3,10.00,EUR,2026-10-12",
	)
	s := runOnFakeClock(t, cfg)
	assert.Equal(t, int64(3), s.inTable)
	want, got := totalsVsOrders(t, cfg.db)
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"ord-1 1200 0"}, dump(t, cfg.db, "SELECT id, ' ', eur_cents, ' ', late FROM day_orders WHERE customer = 'cust-1'"))
}

// -fresh forgets the checkpoint before it clears the tables: a run killed
// in between finds no checkpoint and starts over, rather than resuming at
// the saved position into cleared tables (every row before it lost).
func TestFreshKilledHalfwayStartsOver(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows, cfg.failRate, cfg.outage = 300, 0, 0
	s := runOnFakeClock(t, cfg)
	require.Positive(t, s.inTable)

	fresh := s.cfg
	fresh.fresh, fresh.stopHalfway = true, true
	_, _, err := openCheckpoint(t.Context(), fresh)
	require.ErrorIs(t, err, errHalfway)

	again := runOnFakeClock(t, cfg)
	assert.Equal(t, int64(0), again.at.after, "started over: %s", again.at)
	assert.Equal(t, s.inTable, again.inTable, "every valid order in the table")
	want, got := totalsVsOrders(t, cfg.db)
	assert.Equal(t, want, got)
}
