package sql

import (
	stdsql "database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reviewWide is a row of ten columns.
type reviewWide struct {
	ID                                 int64 `db:"id,key"`
	C1, C2, C3, C4, C5, C6, C7, C8, C9 int64
}

// Review finding 5: the Upserter keeps the text of every statement it
// ever made, by row count, for its life. Write asks for one per batch
// size and per split half, and with Linger a part batch can be any size
// from 1 to BatchSize: over a long run the cache holds a statement of
// every size, whose sum grows with the square of BatchSize (for 10
// columns on PostgreSQL: 37 MB at BatchSize 1,000, 148 MB at 2,000, about
// 900 MB at 5,000) and is never freed while the sink lives.
func TestReviewUpserterStatementCacheIsBounded(t *testing.T) {
	db, err := stdsql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	defer db.Close()
	const batch = 1000
	u, err := NewUpserter[reviewWide](db, Postgres, UpsertOptions{Table: "t", BatchSize: batch})
	require.NoError(t, err)
	require.GreaterOrEqual(t, u.perStmt, batch, "one statement per batch")
	// The sizes Write asks for over a long run with Linger: every part
	// batch size once.
	largest := len(u.statement(batch))
	for rows := 1; rows <= batch; rows++ {
		u.statement(rows)
	}
	total := 0
	for _, s := range u.stmts {
		total += len(s)
	}
	t.Logf("%d statements cached, %d bytes; the largest is %d bytes", len(u.stmts), total, largest)
	assert.LessOrEqual(t, total, 8*largest, "the cache holds a few statements, not one of every size")
}
