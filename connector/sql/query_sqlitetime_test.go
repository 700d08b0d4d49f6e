package sql_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 2: modernc.org/sqlite writes a time.Time as t.String(), which
// for a time from time.Now() (or time.Now().Add(d)) ends in its monotonic
// reading, "... +0000 UTC m=+0.001234". The source reads the row back as a
// time.Time without it, and passes that back as "... +0000 UTC", which
// sorts before the stored text: the last row of every page is read again.
// docs/sql.md says "keep a time watermark in UTC, and on SQLite as the
// driver writes it": these times are in UTC and written by the driver.
func TestQuerySQLiteTimeFromNowIsReadOnce(t *testing.T) {
	type item struct {
		ID      int64     `db:"id"`
		Updated time.Time `db:"updated_at"`
	}
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, updated_at DATETIME NOT NULL)")
	require.NoError(t, err)
	base := time.Now() // as a program stamps its rows; in UTC on this machine
	for i := 1; i <= 5; i++ {
		_, err := db.Exec("INSERT INTO "+table+" (id, updated_at) VALUES (?, ?)", i, base.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	for _, opts := range []sluicesql.QueryOptions{
		{Table: table, Key: []string{"updated_at"}, PageSize: 2},
		{Table: table, Key: []string{"id"}, Watermark: "updated_at", PageSize: 2},
	} {
		got := readAll(t, sluicesql.Query[item](db, d, opts))
		assert.Equal(t, seq(1, 5), func() []int64 {
			var out []int64
			for _, it := range got {
				out = append(out, it.ID)
			}
			return out
		}(), "key %v, watermark %q: each row once", opts.Key, opts.Watermark)
	}
}

// Finding 2, following: the same row is read again at every poll, for as
// long as the run follows the table.
func TestQuerySQLiteTimeFromNowFollowedOnce(t *testing.T) {
	type item struct {
		ID      int64     `db:"id"`
		Updated time.Time `db:"updated_at"`
	}
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, updated_at DATETIME NOT NULL)")
	require.NoError(t, err)
	base := time.Now()
	put := func(id int) {
		_, err := db.Exec("INSERT INTO "+table+" (id, updated_at) VALUES (?, ?)", id, base.Add(time.Duration(id)*time.Second))
		require.NoError(t, err)
	}
	for i := 1; i <= 3; i++ {
		put(i)
	}
	clock := clockwork.NewFakeClock()
	src := sluicesql.Query[item](db, d, sluicesql.QueryOptions{
		Table: table, Key: []string{"id"}, Watermark: "updated_at", Follow: time.Second, Clock: clock})
	f := startFollowing(t, src)
	got := f.next(t, 3)
	assert.Equal(t, int64(3), got[2].ID)
	for id := 4; id <= 5; id++ {
		f.waiting(t, clock)
		put(id)
		clock.Advance(time.Second)
		assert.Equal(t, int64(id), f.next(t, 1)[0].ID, "the poll reads only the row inserted since")
	}
}

// Finding 2, SQLite's own format: a watermark that SQLite sets itself
// (DEFAULT CURRENT_TIMESTAMP, "2026-12-02 10:00:00") is read back as a
// time.Time and passed back as "2026-12-02 10:00:00 +0000 UTC", which sorts
// after the stored text: (updated_at, id) > (?, ?) is false for every row
// that ties with a page's last row, and they are lost; the run succeeds.
// The docs' "on SQLite as the driver writes it" hints at it; the loss is
// silent.
func TestQuerySQLiteCurrentTimestampWatermarkTiesAreRead(t *testing.T) {
	type item struct {
		ID      int64     `db:"id"`
		Updated time.Time `db:"updated_at"`
	}
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)")
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO " + table + " (id) VALUES (1), (2), (3), (4), (5)") // one statement: one CURRENT_TIMESTAMP
	require.NoError(t, err)
	got := readAll(t, sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, Watermark: "updated_at", PageSize: 2}))
	var ids []int64
	for _, it := range got {
		ids = append(ids, it.ID)
	}
	assert.Equal(t, seq(1, 5), ids)
}
