package sql

import (
	stdsql "database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The statements of a full batch stay cached however many other sizes
// come and go; of those, the few used last stay, and a size asked for
// again is made again, the same.
func TestUpserterStatementCachePinsFullBatches(t *testing.T) {
	t.Parallel()
	db, err := stdsql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	defer db.Close()
	for _, c := range []struct {
		name             string
		batch, maxParams int
		pinned           []int
	}{
		{"one statement a batch", 100, 0, []int{100}},
		{"several, with a rest", 100, 60, []int{30, 10}}, // 2 columns: 30 rows a statement
		{"several, no rest", 90, 60, []int{30}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			type row struct {
				ID int64 `db:"id,key"`
				V  int64
			}
			u, err := NewUpserter[row](db, Postgres, UpsertOptions{Table: "t", BatchSize: c.batch, MaxParams: c.maxParams})
			require.NoError(t, err)
			want := map[int]string{}
			for _, p := range c.pinned {
				want[p] = u.statement(p)
			}
			for rows := 1; rows <= 200; rows++ {
				u.statement(rows)
			}
			assert.LessOrEqual(t, len(u.stmts), len(c.pinned)+recentStatements)
			for p, s := range want {
				assert.Equal(t, s, u.stmts[p], "pinned %d", p)
			}
			for rows := 197; rows <= 200; rows++ {
				assert.Contains(t, u.stmts, rows, "used last")
			}
			again := u.statement(3)
			assert.Equal(t, upsertSQL(Postgres, "t", u.cols.names, u.cols.keys, 3, false), again)
		})
	}
}
