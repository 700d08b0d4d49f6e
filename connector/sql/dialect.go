package sql

import (
	"strconv"
	"strings"
)

// A Dialect is the SQL of one family of databases: how it writes
// placeholders and quotes names. The zero Dialect is not valid; use
// [SQLite], [Postgres] or [MySQL].
type Dialect struct {
	name string
	// numbered placeholders ($1, $2) rather than ?.
	numbered bool
	// quote is the character that quotes an identifier.
	quote byte
}

var (
	// SQLite is the dialect of SQLite 3.24 or later (modernc.org/sqlite or
	// mattn/go-sqlite3).
	SQLite = Dialect{name: "sqlite", quote: '"'}
	// Postgres is the dialect of PostgreSQL 9.5 or later
	// (github.com/jackc/pgx/v5/stdlib or lib/pq).
	Postgres = Dialect{name: "postgres", numbered: true, quote: '"'}
	// MySQL is the dialect of MySQL 8 and MariaDB 10.3 or later
	// (github.com/go-sql-driver/mysql).
	MySQL = Dialect{name: "mysql", quote: '`'}
)

// String returns the dialect's name: "sqlite", "postgres" or "mysql".
func (d Dialect) String() string { return d.name }

// placeholder returns the placeholder of the n-th argument of a statement,
// counted from 1.
func (d Dialect) placeholder(n int) string {
	if d.numbered {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// ident quotes a name (a table or column) for the dialect; a name with a
// dot is quoted part by part, as schema.table.
func (d Dialect) ident(name string) string {
	q := string(d.quote)
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + strings.ReplaceAll(p, q, q+q) + q
	}
	return strings.Join(parts, ".")
}
