package sql_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/resilience"
)

// sqliteError has modernc.org/sqlite's Error's method set.
type sqliteError struct {
	msg  string
	code int
}

func (e *sqliteError) Error() string { return e.msg }
func (e *sqliteError) Code() int     { return e.code }

// mattnError has mattn/go-sqlite3's Error's fields.
type mattnError struct {
	Code         int
	ExtendedCode int
}

func (e mattnError) Error() string { return fmt.Sprintf("sqlite3 error %d", e.ExtendedCode) }

// pqCode and pqError have lib/pq's Error's fields.
type pqCode string

type pqError struct {
	Code       pqCode
	Constraint string
	Table      string
}

func (e *pqError) Error() string { return "pq: " + string(e.Code) }

// The classifier of each dialect sorts the codes the brief lists, read
// from the drivers' own error types, wrapped or not.
func TestClassifier(t *testing.T) {
	t.Parallel()
	mysqlErr := func(n uint16, state string) error {
		e := &mysql.MySQLError{Number: n, Message: "x"}
		copy(e.SQLState[:], state)
		return e
	}
	for _, c := range []struct {
		name      string
		d         sluicesql.Dialect
		err       error
		transient bool
	}{
		{"pg deadlock", sluicesql.Postgres, &pgconn.PgError{Code: "40P01"}, true},
		{"pg serialization", sluicesql.Postgres, &pgconn.PgError{Code: "40001"}, true},
		{"pg lock not available", sluicesql.Postgres, &pgconn.PgError{Code: "55P03"}, true},
		{"pg connection", sluicesql.Postgres, &pgconn.PgError{Code: "08006"}, true},
		{"pg admin shutdown", sluicesql.Postgres, &pgconn.PgError{Code: "57P01"}, true},
		{"pg too many connections", sluicesql.Postgres, &pgconn.PgError{Code: "53300"}, true},
		{"pg unique", sluicesql.Postgres, &pgconn.PgError{Code: "23505"}, false},
		{"pg not null", sluicesql.Postgres, &pgconn.PgError{Code: "23502"}, false},
		{"pg foreign key", sluicesql.Postgres, &pgconn.PgError{Code: "23503"}, false},
		{"pg check", sluicesql.Postgres, &pgconn.PgError{Code: "23514"}, false},
		{"pg data", sluicesql.Postgres, &pgconn.PgError{Code: "22001"}, false},
		{"pg wrapped deadlock", sluicesql.Postgres, fmt.Errorf("exec: %w", &pgconn.PgError{Code: "40P01"}), true},
		{"lib/pq deadlock", sluicesql.Postgres, &pqError{Code: "40P01"}, true},
		{"lib/pq unique", sluicesql.Postgres, &pqError{Code: "23505"}, false},
		{"mysql deadlock", sluicesql.MySQL, mysqlErr(1213, "40001"), true},
		{"mysql lock wait", sluicesql.MySQL, mysqlErr(1205, "HY000"), true},
		{"mysql too many connections", sluicesql.MySQL, mysqlErr(1040, "08004"), true},
		{"mysql duplicate", sluicesql.MySQL, mysqlErr(1062, "23000"), false},
		{"mysql null", sluicesql.MySQL, mysqlErr(1048, "23000"), false},
		{"mysql foreign key", sluicesql.MySQL, mysqlErr(1452, "23000"), false},
		{"mysql check", sluicesql.MySQL, mysqlErr(3819, "HY000"), false},
		{"mariadb check", sluicesql.MySQL, mysqlErr(4025, "23000"), false},
		{"mysql too long", sluicesql.MySQL, mysqlErr(1406, "22001"), false},
		{"sqlite busy", sluicesql.SQLite, &sqliteError{"database is locked (5) (SQLITE_BUSY)", 5}, true},
		{"sqlite busy snapshot", sluicesql.SQLite, &sqliteError{"busy", 517}, true},
		{"sqlite locked", sluicesql.SQLite, &sqliteError{"locked", 6}, true},
		{"sqlite check", sluicesql.SQLite, &sqliteError{"CHECK constraint failed: c (275)", 275}, false},
		{"sqlite unique", sluicesql.SQLite, &sqliteError{"UNIQUE constraint failed: t.a (2067)", 2067}, false},
		{"sqlite not null", sluicesql.SQLite, &sqliteError{"NOT NULL constraint failed: t.a (1299)", 1299}, false},
		{"sqlite mismatch", sluicesql.SQLite, &sqliteError{"datatype mismatch", 20}, false},
		{"mattn busy", sluicesql.SQLite, mattnError{Code: 5, ExtendedCode: 5}, true},
		{"mattn unique", sluicesql.SQLite, mattnError{Code: 19, ExtendedCode: 2067}, false},
		{"bad conn", sluicesql.MySQL, driver.ErrBadConn, true},
		{"default rules still apply", sluicesql.Postgres, io.ErrUnexpectedEOF, true},
		{"unknown", sluicesql.Postgres, errors.New("relation does not exist"), false},
		{"marked permanent wins", sluicesql.Postgres, resilience.MarkPermanent(&pgconn.PgError{Code: "40P01"}), false},
		{"pg statement timeout", sluicesql.Postgres, &pgconn.PgError{Code: "57014"}, true},
		{"pg cardinality", sluicesql.Postgres, &pgconn.PgError{Code: "21000"}, false},
		{"pg undefined column", sluicesql.Postgres, &pgconn.PgError{Code: "42703"}, false},
		{"mariadb max_statement_time", sluicesql.MySQL, mysqlErr(1969, "70100"), true},
		{"mysql query interrupted", sluicesql.MySQL, mysqlErr(1317, "70100"), true},
		{"mysql max_execution_time", sluicesql.MySQL, mysqlErr(3024, "HY000"), true},
		{"mysql invalid connection", sluicesql.MySQL, mysql.ErrInvalidConn, true},
		{"mysql invalid connection wrapped", sluicesql.MySQL, fmt.Errorf("exec: %w", mysql.ErrInvalidConn), true},
		{"invalid connection is MySQL's text only", sluicesql.Postgres, mysql.ErrInvalidConn, false},
		{"mysql unknown column", sluicesql.MySQL, mysqlErr(1054, "42S22"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.transient, sluicesql.Classifier(c.d).IsTransient(c.err))
		})
	}
	// The pipeline's own cancellation is never transient.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.False(t, sluicesql.Classifier(sluicesql.Postgres).IsTransientContext(ctx, &pgconn.PgError{Code: "40P01"}))
	// A code read for another dialect is not read.
	assert.False(t, sluicesql.Classifier(sluicesql.Postgres).IsTransient(&sqliteError{"busy", 5}))
}

// A RowError names table, constraint, column and code, and unwraps to
// the driver's error.
func TestRowErrorText(t *testing.T) {
	t.Parallel()
	pg := &pgconn.PgError{Code: "23514", Message: "new row violates check constraint"}
	e := &sluicesql.RowError{Table: "orders", Constraint: "qty_nonneg", Code: "23514", Err: pg}
	assert.Equal(t, `sql: upsert into orders: constraint "qty_nonneg" (code 23514): `+pg.Error(), e.Error())
	assert.ErrorIs(t, e, sluicesql.ErrWrite)
	var got *pgconn.PgError
	assert.ErrorAs(t, e, &got)
	e = &sluicesql.RowError{Table: "t", Column: "name", Code: "1048", Err: errors.New("boom")}
	assert.Equal(t, `sql: upsert into t: column "name" (code 1048): boom`, e.Error())
}
