package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// A row that the database refuses fails the job alone, naming the
// constraint: the loader splits its batch until the row is alone, and
// every other row is loaded. One enrich worker keeps the input's order,
// so that the refused row, the last valid one (the last row breaks a rule),
// reaches the loader after every other.
func TestLoadRefusedRowFailsTheJobNamingTheConstraint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := config{
		rows: 300, workers: 1, seed: 42, checkpointEvery: 0,
		db: filepath.Join(dir, "orders.db"), dlq: filepath.Join(dir, "dead-letters.jsonl"),
	}
	// The orders table as the job makes it, with a CHECK that refuses
	// one order the data set holds as valid.
	require.NoError(t, os.MkdirAll(dir, 0o755))
	db, err := sql.Open("sqlite", "file:"+cfg.db)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL, cents INTEGER NOT NULL,
		currency TEXT NOT NULL, eur_cents INTEGER NOT NULL, day TEXT NOT NULL,
		CONSTRAINT not_ord_298 CHECK (id <> 'ord-0000298'))`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	// On the fake clock: the loader's node restarts wait a second and
	// more before the job fails, which took 2 s on the real one.
	s, err := runOnFakeClockErr(t, cfg)
	var re *sluicesql.RowError
	require.ErrorAs(t, err, &re, "the job fails with the row's error")
	assert.Equal(t, "not_ord_298", re.Constraint)
	assert.Equal(t, "SQLITE_CONSTRAINT_CHECK", re.Code)
	assert.Zero(t, s.node("load").DeadLettered, "the loader fails the job, it does not dead-letter")

	ro, err := sql.Open("sqlite", "file:"+cfg.db+"?mode=ro")
	require.NoError(t, err)
	defer ro.Close()
	var refused int
	require.NoError(t, ro.QueryRow(`SELECT count(*) FROM orders WHERE id = 'ord-0000298'`).Scan(&refused))
	assert.Zero(t, refused)
	assert.Equal(t, s.node("validate").Out-1, s.inTable, "every valid order but the refused one is loaded")
	assert.Equal(t, s.changed, s.inTable, "the table holds what the run wrote")
}
