package sql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Review2 finding 6: a row a trigger refuses (a business rule the table
// enforces) is split out of its batch on SQLite, where RAISE(ABORT) is
// SQLITE_CONSTRAINT_TRIGGER, a row's code; on PostgreSQL (RAISE EXCEPTION,
// P0001) and MariaDB (SIGNAL SQLSTATE '45000', 1644) it is a statement
// error: every row of the batch fails, permanent, unsplit. The same
// pipeline isolates the bad row on one database and loses the batch on
// the other two.
func TestReview2UpsertTriggerRefusalIsARowError(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		switch d {
		case sluicesql.SQLite:
			_, err := db.Exec("CREATE TRIGGER " + table + "_no13 BEFORE INSERT ON " + table + " WHEN NEW.qty = 13 BEGIN SELECT RAISE(ABORT, 'qty 13 refused'); END")
			require.NoError(t, err)
		case sluicesql.Postgres:
			_, err := db.Exec("CREATE OR REPLACE FUNCTION " + table + "_no13() RETURNS trigger AS $$ BEGIN IF NEW.qty = 13 THEN RAISE EXCEPTION 'qty 13 refused'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql")
			require.NoError(t, err)
			t.Cleanup(func() {
				db.Exec("DROP TABLE IF EXISTS " + table)
				db.Exec("DROP FUNCTION IF EXISTS " + table + "_no13()")
			})
			_, err = db.Exec("CREATE TRIGGER no13 BEFORE INSERT ON " + table + " FOR EACH ROW EXECUTE FUNCTION " + table + "_no13()")
			require.NoError(t, err)
		case sluicesql.MySQL:
			_, err := db.Exec("CREATE TRIGGER " + table + "_no13 BEFORE INSERT ON " + table + " FOR EACH ROW BEGIN IF NEW.qty = 13 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'qty 13 refused'; END IF; END")
			require.NoError(t, err)
		}
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table, BatchSize: 20})
		require.NoError(t, err)
		errs := u.Write(t.Context(), products(20)) // qty 0..19: row 13 refused
		failed := 0
		for i, e := range errs {
			if e != nil {
				failed++
				if failed == 1 {
					t.Logf("row %d: %v", i, e)
				}
			}
		}
		assert.Equal(t, 1, failed, "only the row the trigger refuses fails")
		assert.Len(t, rows(t, db, table), 19)
	})
}
