package sql_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 10: isText("") is true, and SQLite gives "" as the type of a
// column declared without one (and of a computed column of a From). A BLOB
// key there is kept in the position as a string and passed back as TEXT,
// which SQLite sorts before every BLOB: each page after the first reads
// the first page again, for ever (the run never ends; here the emitter
// stops it after 20 items of a 4-row table). The map's value is a string
// too, though the driver gave []byte.
func TestQueryBlobKeyOfUntypedSQLiteColumn(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (k PRIMARY KEY, v INTEGER NOT NULL)")
	require.NoError(t, err)
	for i := range 4 {
		_, err := db.Exec("INSERT INTO "+table+" (k, v) VALUES (?, ?)", []byte{0x80 | byte(i), 0xff}, i)
		require.NoError(t, err)
	}
	tooMany := errors.New("more items than rows")
	out := &emitter[map[string]any]{fail: func(i int) error {
		if i >= 20 {
			return tooMany
		}
		return nil
	}}
	err = sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}, PageSize: 2}).Run(context.Background(), out)
	assert.NoError(t, err, "the run ends after the 4 rows")
	assert.Len(t, out.items, 4)
	if len(out.items) > 0 {
		assert.IsType(t, []byte(nil), out.items[0]["k"], "the driver gave []byte")
	}
}
