package sql

import (
	stdsql "database/sql"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/sluicehq/sluice/internal/servicetest"
)

// A pair is the row of the plan tests' table, keyed by (a, b).
type pair struct {
	A int64  `db:"a"`
	B int64  `db:"b"`
	C string `db:"c"`
}

// planTable creates table name with a composite key (a, b) and 2000 rows.
func planTable(t *testing.T, db *stdsql.DB, name string) {
	t.Helper()
	_, err := db.Exec("DROP TABLE IF EXISTS " + name)
	require.NoError(t, err)
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + name) })
	_, err = db.Exec("CREATE TABLE " + name + " (a INTEGER NOT NULL, b INTEGER NOT NULL, c VARCHAR(20) NOT NULL, PRIMARY KEY (a, b))")
	require.NoError(t, err)
	var sb strings.Builder
	sb.WriteString("INSERT INTO " + name + " (a, b, c) VALUES ")
	for i := range 2000 {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(" + strconv.Itoa(i/50) + ", " + strconv.Itoa(i%50) + ", 'x')")
	}
	_, err = db.Exec(sb.String())
	require.NoError(t, err)
}

// planOf returns the plan of the page after key (20, 7) of table name.
func planOf(t *testing.T, db *stdsql.DB, d Dialect, explain, name string) string {
	t.Helper()
	sc, err := newScanner[pair]()
	require.NoError(t, err)
	q := buildSQL(d, QueryOptions{Table: name, Key: []string{"a", "b"}, PageSize: 10}, sc)
	rows, err := db.Query(explain+" "+q.next, q.args(position{int64(20), int64(7)})...)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		vals := make([]stdsql.NullString, len(cols))
		dst := make([]any, len(cols))
		for i := range vals {
			dst[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(dst...))
		for i, c := range cols {
			plan = append(plan, c+"="+vals[i].String)
		}
	}
	require.NoError(t, rows.Err())
	return strings.Join(plan, " ")
}

// MariaDB reads the page after a composite key as a range of the primary
// key with the condition written out; with the row-value form, (a, b) >
// (?, ?), it scans the whole index (type=index), which is why the MySQL
// dialect writes it out.
func TestMySQLPageIsARangeOfTheKey(t *testing.T) {
	dsn := servicetest.MariaDB(t)
	db, err := stdsql.Open("mysql", dsn)
	require.NoError(t, err)
	defer db.Close()
	planTable(t, db, "plan_mysql")
	_, err = db.Exec("ANALYZE TABLE plan_mysql")
	require.NoError(t, err)
	plan := planOf(t, db, MySQL, "EXPLAIN", "plan_mysql")
	assert.Contains(t, plan, "type=range", plan)
	assert.Contains(t, plan, "key=PRIMARY", plan)
}

// SQLite searches the key's index for the row-value comparison.
func TestSQLitePageSearchesTheKey(t *testing.T) {
	db, err := stdsql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "plan.db"))
	require.NoError(t, err)
	defer db.Close()
	planTable(t, db, "plan_sqlite")
	plan := planOf(t, db, SQLite, "EXPLAIN QUERY PLAN", "plan_sqlite")
	assert.Contains(t, plan, "SEARCH plan_sqlite USING INDEX", plan)
	assert.Contains(t, plan, "(a,b)>(?,?)", plan)
}
