package sql

import (
	"database/sql/driver"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/resilience"
)

// Classifier returns a [resilience.Classifier] that knows the errors of
// dialect d's databases, for a node that writes with database/sql:
//
//   - transient: a deadlock (PostgreSQL 40P01, MySQL 1213), a
//     serialization failure (40001), a lock wait timeout (MySQL 1205,
//     PostgreSQL 55P03), a statement timeout or interruption (PostgreSQL
//     57014, MariaDB 1969, MySQL 3024, 1317), SQLite's SQLITE_BUSY and
//     SQLITE_LOCKED, a lost or refused connection (SQLSTATE class 08,
//     MySQL 1040, 1053, 1927, 2006, 2013, go-sql-driver/mysql's
//     ErrInvalidConn by its text "invalid connection", PostgreSQL 53300,
//     57P01 to 57P03, [driver.ErrBadConn]);
//   - permanent: a constraint violation (SQLSTATE class 23: unique 23505,
//     not null 23502, foreign key 23503, check 23514; MySQL 1062, 1048,
//     1451, 1452, 3819, MariaDB 4025; SQLITE_CONSTRAINT and its extended
//     codes), bad data (SQLSTATE class 22, MySQL 1263, 1264, 1265, 1292,
//     1366, 1406; SQLITE_MISMATCH, SQLITE_TOOBIG, SQLITE_RANGE) and a
//     trigger's refusal (PostgreSQL P0001, RAISE EXCEPTION; MySQL 1644,
//     SIGNAL; SQLite's SQLITE_CONSTRAINT_TRIGGER, RAISE(ABORT)).
//
// Other errors are left to the default rules (see [resilience.Classifier]),
// as are the pipeline's own cancellation and its marks. Before its own
// rules it honours [Upsert]'s verdicts: a [*RowError] that Upsert judged
// transient is transient (one it judged permanent is wrapped by
// [resilience.MarkPermanent], which every classifier honours), so that
// setting this classifier on Upsert's node changes none of them. The codes are read
// without importing a driver: from an error's SQLState() string or Code()
// int method, else from the fields of the drivers' error types
// (pgconn.PgError, lib/pq's Error, mysql.MySQLError, mattn's sqlite3.Error)
// by their names. The errors of [Upsert] are already marked by these
// rules, transient or permanent, so that a pipeline needs no classifier of
// its own for them.
func Classifier(d Dialect) resilience.Classifier {
	return resilience.Classifier{}.
		Transient(markedTransient).
		Transient(func(err error) bool { return inspect(d, err).class == classTransient }).
		Permanent(func(err error) bool { return inspect(d, err).class == classPermanent })
}

// An errClass is what an error's code says of another attempt.
type errClass int

const (
	classUnknown errClass = iota
	classTransient
	classPermanent
)

// A dbError is what a driver's error says: its code in the database's own
// words and the constraint, table and column it names, when it does.
type dbError struct {
	code       string
	constraint string
	table      string
	column     string
	class      errClass
	// row: the error is a row's, a constraint or bad data, which another
	// row of the batch would not have; Upsert splits the batch on it.
	row bool
	// conn: the connection failed, so that a COMMIT's outcome is unknown.
	conn bool
}

// inspectTree returns what the first driver error in err's tree says.
func inspectTree(d Dialect, err error) dbError {
	for err != nil {
		if e := inspect(d, err); e.code != "" || e.class != classUnknown {
			return e
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range x.Unwrap() {
				if e := inspectTree(d, inner); e.code != "" || e.class != classUnknown {
					return e
				}
			}
			return dbError{}
		default:
			return dbError{}
		}
	}
	return dbError{}
}

// inspect reads err itself, not the errors it wraps.
func inspect(d Dialect, err error) dbError {
	if err == driver.ErrBadConn {
		return dbError{class: classTransient, conn: true}
	}
	switch d.name {
	case Postgres.name:
		return inspectPostgres(err)
	case MySQL.name:
		return inspectMySQL(err)
	case SQLite.name:
		return inspectSQLite(err)
	}
	return dbError{}
}

func inspectPostgres(err error) dbError {
	var e dbError
	if s, ok := err.(interface{ SQLState() string }); ok {
		e.code = s.SQLState()
	} else {
		e.code = stringField(err, "Code")
	}
	if len(e.code) != 5 {
		return dbError{}
	}
	e.constraint = firstField(err, "ConstraintName", "Constraint")
	e.table = firstField(err, "TableName", "Table")
	e.column = firstField(err, "ColumnName", "Column")
	switch {
	case e.code == "57P01", e.code == "57P02", e.code == "57P03", strings.HasPrefix(e.code, "08"):
		e.class, e.conn = classTransient, true
	case e.code == "40001", e.code == "40P01", e.code == "55P03", e.code == "53300", e.code == "57014":
		e.class = classTransient
	case strings.HasPrefix(e.code, "23"), strings.HasPrefix(e.code, "22"):
		e.class, e.row = classPermanent, true
	case e.code == "P0001":
		// RAISE EXCEPTION without an ERRCODE: a trigger (or a function
		// it calls) refused the row, a business rule of the table's.
		e.class, e.row = classPermanent, true
	case e.code == "54000":
		// A program limit one value exceeds: a text too large for its
		// column's btree index ("index row requires ... bytes"). The
		// rows apart pass; down to one row, it is that row's.
		e.row = true
	case e.code == "21000":
		// A cardinality violation: ON CONFLICT DO UPDATE meets one key
		// twice in one statement. The rows apart pass.
		e.row = true
	}
	return e
}

var (
	mysqlConn      = []int{1040, 1053, 1927, 2006, 2013}
	mysqlTransient = []int{1205, 1213, 1317, 1969, 3024}
	mysqlPermanent = []int{1048, 1062, 1263, 1264, 1265, 1292, 1366, 1406, 1451, 1452, 1644, 3819, 4025}
	// Constraint and column names in MySQL's and MariaDB's messages, by
	// error number, anchored to the message's fixed text, since a
	// message may quote the row's data (1062's duplicate entry, 1366's
	// value) and the data may look like anything.
	mysqlNames = map[int]*regexp.Regexp{
		// Duplicate entry '%s' for key '%s' (MySQL 8: 'table.key').
		1062: regexp.MustCompile(`for key '(?:[^'.]*\.)?(?P<constraint>[^']*)'$`),
		// Check constraint '%s' is violated.
		3819: regexp.MustCompile(`^Check constraint '(?P<constraint>[^']*)' is violated`),
		// CONSTRAINT `%s` failed for `db`.`table`
		4025: regexp.MustCompile("^CONSTRAINT `(?P<constraint>[^`]*)` failed for "),
		// Cannot add or update a child row: a foreign key constraint
		// fails (`db`.`t`, CONSTRAINT `fk` FOREIGN KEY (`c`) REFERENCES ...
		1451: mysqlForeignKey,
		1452: mysqlForeignKey,
		// Column '%s' cannot be null
		1048: regexp.MustCompile(`^Column '(?P<column>[^']*)' cannot be null$`),
		// Data too long / Out of range value / Data truncated (an ENUM's
		// or SET's unlisted value) for column '%s' at row %d
		1406: mysqlColumnAtRow,
		1265: mysqlColumnAtRow,
		1264: mysqlColumnAtRow,
		// Incorrect %s value: '%s' for column '%s' at row %d (MariaDB:
		// for column `db`.`t`.`c`).
		1366: mysqlColumnAtRow,
		1292: mysqlColumnAtRow,
		// Column set to default value; NULL supplied to NOT NULL column
		// '%s' at row %d
		1263: regexp.MustCompile(`NOT NULL column '(?P<column>[^']*)' at row [0-9]+$`),
	}
	mysqlForeignKey  = regexp.MustCompile("^Cannot (?:add or update a child|delete or update a parent) row: a foreign key constraint fails \\([^()]*?, CONSTRAINT `(?P<constraint>[^`]*)` FOREIGN KEY")
	mysqlColumnAtRow = regexp.MustCompile("for column (?:`[^`]*`\\.)*[`']?(?P<column>[^`']*)[`']? at row [0-9]+$")
)

func inspectMySQL(err error) dbError {
	if err.Error() == "invalid connection" {
		// go-sql-driver/mysql's ErrInvalidConn: the connection broke
		// while a statement ran.
		return dbError{class: classTransient, conn: true}
	}
	v := structOf(err)
	if !v.IsValid() {
		return dbError{}
	}
	num := v.FieldByName("Number")
	if !num.IsValid() || !num.CanUint() {
		return dbError{}
	}
	n := int(num.Uint())
	e := dbError{code: strconv.Itoa(n)}
	if re := mysqlNames[n]; re != nil {
		if m := re.FindStringSubmatch(stringField(err, "Message")); m != nil {
			for i, name := range re.SubexpNames() {
				switch name {
				case "constraint":
					e.constraint = m[i]
				case "column":
					e.column = m[i]
				}
			}
		}
	}
	var state string
	if s := v.FieldByName("SQLState"); s.IsValid() && s.Kind() == reflect.Array && s.Len() == 5 {
		b := make([]byte, 5)
		for i := range b {
			b[i] = byte(s.Index(i).Uint())
		}
		state = string(b)
	}
	switch {
	case slices.Contains(mysqlConn, n), strings.HasPrefix(state, "08"):
		e.class, e.conn = classTransient, true
	case slices.Contains(mysqlTransient, n), state == "40001":
		e.class = classTransient
	case slices.Contains(mysqlPermanent, n), strings.HasPrefix(state, "23"), strings.HasPrefix(state, "22"):
		e.class, e.row = classPermanent, true
	}
	return e
}

// SQLite's result codes (https://sqlite.org/rescode.html): the primary
// code is the low byte of an extended code.
const (
	sqliteBusy       = 5
	sqliteLocked     = 6
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
	sqliteRange      = 25
)

var (
	sqliteNames = map[int]string{
		5: "SQLITE_BUSY", 261: "SQLITE_BUSY_RECOVERY", 517: "SQLITE_BUSY_SNAPSHOT", 773: "SQLITE_BUSY_TIMEOUT",
		6: "SQLITE_LOCKED", 262: "SQLITE_LOCKED_SHAREDCACHE", 518: "SQLITE_LOCKED_VTAB",
		18: "SQLITE_TOOBIG", 19: "SQLITE_CONSTRAINT", 20: "SQLITE_MISMATCH", 25: "SQLITE_RANGE",
		275: "SQLITE_CONSTRAINT_CHECK", 531: "SQLITE_CONSTRAINT_COMMITHOOK", 787: "SQLITE_CONSTRAINT_FOREIGNKEY",
		1043: "SQLITE_CONSTRAINT_FUNCTION", 1299: "SQLITE_CONSTRAINT_NOTNULL", 1555: "SQLITE_CONSTRAINT_PRIMARYKEY",
		1811: "SQLITE_CONSTRAINT_TRIGGER", 2067: "SQLITE_CONSTRAINT_UNIQUE", 2323: "SQLITE_CONSTRAINT_VTAB",
		2579: "SQLITE_CONSTRAINT_ROWID", 2835: "SQLITE_CONSTRAINT_PINNED", 3091: "SQLITE_CONSTRAINT_DATATYPE",
	}
	// "CHECK constraint failed: c", "NOT NULL constraint failed: t.col",
	// "UNIQUE constraint failed: t.a, t.b".
	sqliteCheck  = regexp.MustCompile(`CHECK constraint failed: ([^\s()]+)`)
	sqliteColumn = regexp.MustCompile(`(?:NOT NULL|UNIQUE) constraint failed: ([^\s(]+(?:, [^\s(]+)*)`)
)

func inspectSQLite(err error) dbError {
	code, ok := -1, false
	if c, is := err.(interface{ Code() int }); is {
		code, ok = c.Code(), true
	} else if v := structOf(err); v.IsValid() {
		// mattn/go-sqlite3's Error: ExtendedCode, else Code.
		for _, name := range []string{"ExtendedCode", "Code"} {
			if f := v.FieldByName(name); f.IsValid() && f.CanInt() && f.Int() != 0 {
				code, ok = int(f.Int()), true
				break
			}
		}
	}
	if !ok || code <= 0 {
		return dbError{}
	}
	e := dbError{code: sqliteNames[code]}
	if e.code == "" {
		e.code = strconv.Itoa(code)
	}
	msg := err.Error()
	if m := sqliteCheck.FindStringSubmatch(msg); m != nil {
		e.constraint = m[1]
	}
	if m := sqliteColumn.FindStringSubmatch(msg); m != nil {
		e.column = m[1]
		if t, c, ok := strings.Cut(m[1], "."); ok && !strings.Contains(m[1], ",") {
			e.table, e.column = t, c
		}
	}
	switch code & 0xff {
	case sqliteBusy, sqliteLocked:
		e.class = classTransient
	case sqliteConstraint, sqliteMismatch, sqliteTooBig, sqliteRange:
		e.class, e.row = classPermanent, true
	}
	return e
}

// structOf returns the struct err is or points to, or the zero Value.
func structOf(err error) reflect.Value {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v
}

// stringField returns err's field of that name when it is a string (or of
// a string type), else "".
func stringField(err error, name string) string {
	v := structOf(err)
	if !v.IsValid() {
		return ""
	}
	f := v.FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}

func firstField(err error, names ...string) string {
	for _, n := range names {
		if s := stringField(err, n); s != "" {
			return s
		}
	}
	return ""
}
