package sql_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// The SQLite key check reads AUTOINCREMENT only where SQLite takes it,
// after PRIMARY KEY, outside literals, quoted names and comments; finds a
// table under any case of its name, in temp before main; and fails Open
// for a table it does not find, rather than skip the check.
func TestOutboxSQLiteKeyCheckReadsTheKeysDefinition(t *testing.T) {
	for _, c := range []struct {
		name, ddl, table string
		ok               bool
	}{
		{"autoincrement", `CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload TEXT NOT NULL)`, "outbox", true},
		{"autoincrement, name in another case", `CREATE TABLE Outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload TEXT NOT NULL)`, "OUTBOX", true},
		{"autoincrement, lower case, conflict clause", `create table outbox (id integer primary key asc on conflict abort autoincrement, topic text not null, payload text not null)`, "outbox", true},
		{"without rowid", `CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL) WITHOUT ROWID`, "outbox", true},
		{"word in a comment", `CREATE TABLE outbox (id INTEGER PRIMARY KEY /* AUTOINCREMENT */, topic TEXT NOT NULL, payload TEXT NOT NULL)`, "outbox", false},
		{"word in a line comment", "CREATE TABLE outbox (id INTEGER PRIMARY KEY, -- PRIMARY KEY AUTOINCREMENT\n topic TEXT NOT NULL, payload TEXT NOT NULL)", "outbox", false},
		{"word as a quoted column", `CREATE TABLE outbox (id INTEGER PRIMARY KEY, "PRIMARY KEY AUTOINCREMENT" TEXT, topic TEXT NOT NULL, payload TEXT NOT NULL)`, "outbox", false},
		{"words in a CHECK's literal", `CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL CHECK (topic <> 'x PRIMARY KEY AUTOINCREMENT'), payload TEXT NOT NULL)`, "outbox", false},
		{"without rowid in a literal", `CREATE TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL DEFAULT 'WITHOUT ROWID', payload TEXT NOT NULL)`, "outbox", false},
		{"table not found", `CREATE TABLE other (id INTEGER PRIMARY KEY AUTOINCREMENT)`, "outbox", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openSQLite(t)
			_, err := db.Exec(c.ddl)
			require.NoError(t, err)
			err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: c.table}).Open(context.Background())
			if c.ok {
				assert.NoError(t, err)
				return
			}
			var oe *sluicesql.OutboxOptionError
			require.ErrorAs(t, err, &oe)
			assert.ErrorIs(t, err, sluicesql.ErrOutboxOptions)
			t.Log(err)
		})
	}
}

// A temp table is found, as SQLite finds it before main's of that name.
func TestOutboxSQLiteKeyCheckFindsATempTable(t *testing.T) {
	db := openSQLite(t)
	db.SetMaxOpenConns(1) // a temp table is the connection's
	_, err := db.Exec(`CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload TEXT NOT NULL)`)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TEMP TABLE outbox (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL)`)
	require.NoError(t, err)
	err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox"}).Open(context.Background())
	assert.ErrorIs(t, err, sluicesql.ErrOutboxOptions, "the temp table, which the outbox would read, has no AUTOINCREMENT")
	err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "main.outbox"}).Open(context.Background())
	assert.NoError(t, err)
}
