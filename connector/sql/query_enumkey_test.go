package sql_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

type enumKeyTicket struct {
	Status string `db:"status"`
	ID     int64  `db:"id"`
}

// A key column of type ENUM on MariaDB/MySQL: the database orders it by
// the value's place in the ENUM's list, but the next page's condition
// would compare it with the text of the last row's value, so rows that
// sort later by the list but earlier as text would be left out without
// a word. The source refuses such a key with a KeyError before it emits
// a row.
func TestQueryEnumKeyColumnIsRefused(t *testing.T) {
	for _, d := range databases {
		if d.dialect != sluicesql.MySQL {
			continue
		}
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			table := tableName(t, db, d.dialect)
			_, err := db.Exec("CREATE TABLE " + table + " (status ENUM('open','closed','archived') NOT NULL, id BIGINT NOT NULL, PRIMARY KEY (status, id))")
			require.NoError(t, err)
			_, err = db.Exec("INSERT INTO " + table + " (status, id) VALUES ('open',1),('open',2),('closed',3),('archived',4)")
			require.NoError(t, err)
			src := sluicesql.Query[enumKeyTicket](db, d.dialect, sluicesql.QueryOptions{Table: table, Key: []string{"status", "id"}, PageSize: 2})
			e := &emitter[enumKeyTicket]{}
			err = src.Run(context.Background(), e)
			require.ErrorIs(t, err, sluicesql.ErrKey, "read %v", e.items)
			var ke *sluicesql.KeyError
			require.ErrorAs(t, err, &ke)
			require.Contains(t, ke.Source, table)
			require.Contains(t, err.Error(), `"status"`)
			require.Contains(t, err.Error(), "ENUM")
			require.Empty(t, e.items, "no row is emitted before the error")

			// Keyed by the plain column alone, the same table reads whole.
			src = sluicesql.Query[enumKeyTicket](db, d.dialect, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 2})
			e = &emitter[enumKeyTicket]{}
			require.NoError(t, src.Run(context.Background(), e))
			require.Len(t, e.items, 4, "read %v", e.items)
		})
	}
}

// The same for a SET column, which MariaDB orders by its bits.
func TestQuerySetKeyColumnIsRefused(t *testing.T) {
	for _, d := range databases {
		if d.dialect != sluicesql.MySQL {
			continue
		}
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			table := tableName(t, db, d.dialect)
			_, err := db.Exec("CREATE TABLE " + table + " (status SET('open','closed','archived') NOT NULL, id BIGINT NOT NULL, PRIMARY KEY (status, id))")
			require.NoError(t, err)
			_, err = db.Exec("INSERT INTO " + table + " (status, id) VALUES ('open',1),('closed',2),('archived',3)")
			require.NoError(t, err)
			src := sluicesql.Query[map[string]any](db, d.dialect, sluicesql.QueryOptions{Table: table, Key: []string{"status", "id"}, PageSize: 2})
			e := &emitter[map[string]any]{}
			err = src.Run(context.Background(), e)
			require.ErrorIs(t, err, sluicesql.ErrKey, "read %v", e.items)
			require.Contains(t, err.Error(), `"status"`)
			require.Empty(t, e.items)
		})
	}
}
