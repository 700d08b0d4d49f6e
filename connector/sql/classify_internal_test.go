package sql

import (
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/resilience"
)

// MySQL's and MariaDB's names are read from the message's fixed text,
// whatever the row's data quoted in it says.
func TestInspectMySQLNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		number             uint16
		msg                string
		constraint, column string
	}{
		{"duplicate", 1062, "Duplicate entry 'a@x' for key 'users_email'", "users_email", ""},
		{"duplicate mysql 8", 1062, "Duplicate entry 'a@x' for key 'users.users_email'", "users_email", ""},
		{"duplicate, data names a constraint", 1062, "Duplicate entry 'Constraint 'orders_fk' x' for key 'users_email'", "users_email", ""},
		{"duplicate, data names a key", 1062, "Duplicate entry 'x' for key 'evil' y' for key 'users_email'", "users_email", ""},
		{"duplicate, data with CONSTRAINT", 1062, "Duplicate entry 'CONSTRAINT `fake` failed' for key 'PRIMARY'", "PRIMARY", ""},
		{"mysql check", 3819, "Check constraint 'qty_nonneg' is violated.", "qty_nonneg", ""},
		{"mariadb check", 4025, "CONSTRAINT `qty_nonneg` failed for `db`.`t`", "qty_nonneg", ""},
		{"foreign key", 1452, "Cannot add or update a child row: a foreign key constraint fails (`db`.`child`, CONSTRAINT `child_fk` FOREIGN KEY (`pid`) REFERENCES `parent` (`id`))", "child_fk", ""},
		{"foreign key parent", 1451, "Cannot delete or update a parent row: a foreign key constraint fails (`db`.`child`, CONSTRAINT `child_fk` FOREIGN KEY (`pid`) REFERENCES `parent` (`id`))", "child_fk", ""},
		{"not null", 1048, "Column 'email' cannot be null", "", "email"},
		{"too long", 1406, "Data too long for column 'name' at row 3", "", "name"},
		{"out of range", 1264, "Out of range value for column 'qty' at row 1", "", "qty"},
		{"incorrect value mysql", 1366, "Incorrect integer value: 'for column 'evil' at row 9' for column 'qty' at row 1", "", "qty"},
		{"incorrect value mariadb", 1366, "Incorrect integer value: 'x' for column `db`.`t`.`qty` at row 1", "", "qty"},
		{"enum value mariadb", 1265, "Data truncated for column 'colour' at row 5", "", "colour"},
		{"null to not null", 1263, "Column set to default value; NULL supplied to NOT NULL column 'qty' at row 2", "", "qty"},
		{"other code names nothing", 1054, "Unknown column 'name' in 'field list'", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := inspectMySQL(&mysql.MySQLError{Number: c.number, Message: c.msg})
			assert.Equal(t, c.constraint, e.constraint)
			assert.Equal(t, c.column, e.column)
		})
	}
}

// Which errors are a row's (split), which a lost connection's (a COMMIT's
// outcome unknown).
func TestInspectRowAndConn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		d         Dialect
		err       error
		row, conn bool
	}{
		{"pg unique", Postgres, &pgconn.PgError{Code: "23505"}, true, false},
		{"pg data", Postgres, &pgconn.PgError{Code: "22003"}, true, false},
		{"pg cardinality", Postgres, &pgconn.PgError{Code: "21000"}, true, false},
		{"pg undefined column", Postgres, &pgconn.PgError{Code: "42703"}, false, false},
		{"pg permission", Postgres, &pgconn.PgError{Code: "42501"}, false, false},
		{"pg deadlock", Postgres, &pgconn.PgError{Code: "40P01"}, false, false},
		{"pg connection", Postgres, &pgconn.PgError{Code: "08006"}, false, true},
		{"pg trigger raise", Postgres, &pgconn.PgError{Code: "P0001"}, true, false},
		{"pg enum value", Postgres, &pgconn.PgError{Code: "22P02"}, true, false},
		{"mysql enum value", MySQL, &mysql.MySQLError{Number: 1265, SQLState: [5]byte{'0', '1', '0', '0', '0'}}, true, false},
		{"mysql trigger signal", MySQL, &mysql.MySQLError{Number: 1644, SQLState: [5]byte{'4', '5', '0', '0', '0'}}, true, false},
		{"pg shutdown", Postgres, &pgconn.PgError{Code: "57P01"}, false, true},
		{"mysql duplicate", MySQL, &mysql.MySQLError{Number: 1062, SQLState: [5]byte{'2', '3', '0', '0', '0'}}, true, false},
		{"mysql unknown column", MySQL, &mysql.MySQLError{Number: 1054, SQLState: [5]byte{'4', '2', 'S', '2', '2'}}, false, false},
		{"mysql gone away", MySQL, &mysql.MySQLError{Number: 2006}, false, true},
		{"mysql invalid connection", MySQL, mysql.ErrInvalidConn, false, true},
		{"bad conn", SQLite, errors.New("x"), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := inspect(c.d, c.err)
			assert.Equal(t, c.row, e.row, "row")
			assert.Equal(t, c.conn, e.conn, "conn")
		})
	}
}

// Classifier honours an Upserter's verdict before its own rules: a
// RowError judged transient stays transient under Classifier(d), even
// when a code in its tree reads permanent; one marked permanent stays
// permanent, even when a code reads transient.
func TestClassifierHonoursUpsertMarks(t *testing.T) {
	t.Parallel()
	c := Classifier(Postgres)
	transient := &RowError{Table: "t", Code: "23505", Err: &pgconn.PgError{Code: "23505"}, transient: true}
	assert.True(t, c.IsTransient(transient))
	assert.True(t, c.IsTransient(resilience.MarkTransient(transient)))
	permanent := resilience.MarkPermanent(&RowError{Table: "t", Code: "40P01", Err: &pgconn.PgError{Code: "40P01"}})
	assert.False(t, c.IsTransient(permanent))
	assert.False(t, c.IsTransient(&RowError{Table: "t", Code: "23505", Err: &pgconn.PgError{Code: "23505"}}))
}
