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
	// (github.com/go-sql-driver/mysql). The server must be in strict mode
	// (STRICT_TRANS_TABLES or STRICT_ALL_TABLES in sql_mode, its default)
	// for an upsert to refuse a value too long for its column or a NULL
	// for a NOT NULL one: without it, it would cut or blank the value
	// and report the row written, so an [Upserter] asks the session's
	// sql_mode and writes nothing while it is not strict (its rows fail,
	// matching [ErrStatement]).
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

// keyAfter returns the condition that a row's key, the columns cols, is
// past a position: placeholders are numbered from first, and args says
// which value of the position each one takes.
//
// SQLite and PostgreSQL compare row values, (k1, k2) > (?, ?), and use
// an index on the key for it. MySQL (MariaDB) gets the same condition
// expanded, k1 >= ? AND (k1 > ? OR k2 > ?), which its optimizer reads
// as a range of the index, where it reads the row-value form as a scan.
func (d Dialect) keyAfter(cols []string, first int) (cond string, args []int) {
	n := first
	ph := func(i int) string {
		args = append(args, i)
		n++
		return d.placeholder(n - 1)
	}
	if len(cols) == 1 {
		return d.ident(cols[0]) + " > " + ph(0), args
	}
	if d.name != "mysql" {
		var l, r []string
		for i, c := range cols {
			l = append(l, d.ident(c))
			r = append(r, ph(i))
		}
		return "(" + strings.Join(l, ", ") + ") > (" + strings.Join(r, ", ") + ")", args
	}
	// k1 >= a AND (k1 > a OR (k2 >= b AND (k2 > b OR k3 > c)))
	var b strings.Builder
	last := len(cols) - 1
	for i, c := range cols[:last] {
		id := d.ident(c)
		b.WriteString(id + " >= " + ph(i) + " AND (" + id + " > " + ph(i) + " OR ")
	}
	b.WriteString(d.ident(cols[last]) + " > " + ph(last))
	b.WriteString(strings.Repeat(")", last))
	return "(" + b.String() + ")", args
}

// maxParams is the most placeholders one statement of the dialect takes:
// SQLite's since 3.32, and the 16-bit count of PostgreSQL's and MySQL's
// protocols.
func (d Dialect) maxParams() int {
	if d.name == SQLite.name {
		return 32766
	}
	return 65535
}
