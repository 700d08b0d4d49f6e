package sql_test

import (
	"cmp"
	"crypto/rand"
	stdsql "database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/resilience"
)

type namedRow struct {
	ID   int64   `db:"id,key"`
	Name *string `db:"name"`
}

// One value too large for its column's btree index (PostgreSQL's
// SQLSTATE 54000, "index row requires ... bytes") is its row's fault: the
// batch is split, the other rows are written once, and only that row
// fails, permanently. The whole batch failed with it, 499 good rows of a
// batch of 500 set aside as "statement refused".
func TestUpsertPostgresIndexRowTooBigFailsOnlyItsRow(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	table := tableName(t, db, sluicesql.Postgres)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, name TEXT)")
	require.NoError(t, err)
	_, err = db.Exec("CREATE INDEX " + table + "_name ON " + table + " (name)")
	require.NoError(t, err)
	u, err := sluicesql.NewUpserter[namedRow](db, sluicesql.Postgres, sluicesql.UpsertOptions{Table: table})
	require.NoError(t, err)
	for _, bad := range []int{0, 3, 7} {
		items := make([]namedRow, 8)
		for i := range items {
			items[i] = namedRow{ID: int64(10*bad + i + 1), Name: str(fmt.Sprintf("n%d", i))}
		}
		b := make([]byte, 10000)
		_, _ = rand.Read(b)
		items[bad].Name = str(hex.EncodeToString(b)) // 20 000 characters that do not compress
		errs := u.Write(t.Context(), items)
		require.Len(t, errs, 8)
		for i, err := range errs {
			if i == bad {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "54000")
				assert.False(t, resilience.IsTransient(err), "the row's own: retrying it fails again: %v", err)
				assert.False(t, resilience.IsBlameless(err), "the row's fault: %v", err)
				continue
			}
			assert.NoError(t, err, "row %d", i)
		}
		var n int
		require.NoError(t, db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE id BETWEEN %d AND %d", table, 10*bad+1, 10*bad+8)).Scan(&n))
		assert.Equal(t, 7, n, "the 7 good rows are written")
	}
}

// MySQL and MariaDB refuse a value too long for its column and a NULL
// for a NOT NULL one only in strict mode, their default: there, only
// those rows fail. Without it (sql_mode ”), the server would cut the
// value and write an empty one, with warnings the driver does not return,
// and report every row written: the upserter asks the session's sql_mode
// and, when it is not strict, writes nothing and gives every row an error
// matching ErrStatement that names sql_mode. It asks again at the next
// Write: once the mode is strict, the rows are written.
func TestUpsertMariaDBNeedsStrictMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"", "STRICT_ALL_TABLES", "TRADITIONAL", "ANSI", "NO_ENGINE_SUBSTITUTION"} {
		strict := mode == "STRICT_ALL_TABLES" || mode == "TRADITIONAL"
		t.Run("mode "+cmp.Or(mode, "none"), func(t *testing.T) {
			t.Parallel()
			dsn := mariaDBDSN(t) + "&sql_mode=" + url.QueryEscape("'"+mode+"'")
			db, err := stdsql.Open("mysql", dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(1) // one session, whose mode the test changes below
			table := tableName(t, db, sluicesql.MySQL)
			_, err = db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, name VARCHAR(5) NOT NULL) ENGINE=InnoDB")
			require.NoError(t, err)
			u, err := sluicesql.NewUpserter[namedRow](db, sluicesql.MySQL, sluicesql.UpsertOptions{Table: table})
			require.NoError(t, err)
			batch := []namedRow{{1, str("ok")}, {2, str("much too long")}, {3, nil}, {4, str("ok4")}}
			read := func() map[int64]string {
				got := map[int64]string{}
				rows, err := db.Query("SELECT id, name FROM " + table)
				require.NoError(t, err)
				defer rows.Close()
				for rows.Next() {
					var id int64
					var name string
					require.NoError(t, rows.Scan(&id, &name))
					got[id] = name
				}
				require.NoError(t, rows.Err())
				return got
			}
			errs := u.Write(t.Context(), batch)
			require.Len(t, errs, 4)
			if !strict {
				for i, err := range errs {
					require.ErrorIs(t, err, sluicesql.ErrStatement, "row %d", i)
					assert.ErrorContains(t, err, "sql_mode")
					assert.ErrorContains(t, err, table)
					assert.False(t, resilience.IsTransient(err), "permanent")
				}
				assert.Empty(t, read(), "nothing written")
				_, err = db.Exec("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
				require.NoError(t, err)
				errs = u.Write(t.Context(), batch)
				require.Len(t, errs, 4)
			}
			assert.NoError(t, errs[0])
			assert.Error(t, errs[1])
			assert.Error(t, errs[2])
			assert.NoError(t, errs[3])
			assert.Equal(t, map[int64]string{1: "ok", 4: "ok4"}, read())
		})
	}
}

// A sql_mode question that fails without the server's answer (here, a
// closed pool) is transient for every row, as a lost connection's
// statement is: nothing is written, and layer 1 may try again.
func TestUpsertMariaDBModeQuestionThatFailsIsTransient(t *testing.T) {
	t.Parallel()
	db, err := stdsql.Open("mysql", mariaDBDSN(t))
	require.NoError(t, err)
	u, err := sluicesql.NewUpserter[namedRow](db, sluicesql.MySQL, sluicesql.UpsertOptions{Table: "never_made"})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	errs := u.Write(t.Context(), []namedRow{{1, str("a")}, {2, str("b")}})
	require.Len(t, errs, 2)
	for _, err := range errs {
		assert.ErrorContains(t, err, "sql_mode")
		assert.NotErrorIs(t, err, sluicesql.ErrStatement)
		assert.True(t, resilience.IsTransient(err), "%v", err)
	}
}

// In a pipeline with resilience.DeadLetter, a session not in strict mode
// dead-letters every row once, without a retry (the error is permanent),
// and writes none: each letter can be re-driven once the mode is fixed.
func TestUpsertMariaDBNotStrictDeadLettersEveryRowOnce(t *testing.T) {
	t.Parallel()
	db, err := stdsql.Open("mysql", mariaDBDSN(t)+"&sql_mode=%27%27")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	table := productTable(t, db, sluicesql.MySQL)
	items := products(7)
	r := runUpsert(t, t.Context(), db, sluicesql.MySQL, sluicesql.UpsertOptions{Table: table, BatchSize: 3}, items)
	require.NoError(t, r.err)
	var dead []product
	for _, e := range r.dlq.Envelopes() {
		dead = append(dead, e.Item.(product))
		assert.ErrorIs(t, e.Err, sluicesql.ErrStatement)
		assert.ErrorContains(t, e.Err, "sql_mode")
	}
	assert.ElementsMatch(t, items, dead, "each row dead-lettered once")
	assert.Empty(t, rows(t, db, table))
	assert.Zero(t, r.node.ItemRetries)
	assert.Zero(t, r.node.Out)
}
