package sql_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint"
	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// The kill test runs its own test binary as a child process that copies
// a table until it is killed; the child finds its database, tables and
// checkpoint file through this variable, as JSON (a killChild).
const killChildEnv = "SLUICE_SQL_KILL_CHILD"

// A killChild says what the child copies: the database (its name in
// databases, and the path or data source name its driver opens), the
// prefix of its two tables, and the folder of its checkpoint file.
type killChild struct {
	Database string
	DSN      string
	Prefix   string
	Dir      string
}

// killRows is the size of the table the child copies; the race
// detector's child is slower.
var killRows = map[bool]int{false: 2500, true: 1200}[raceEnabled]

// TestQueryKillChild is the child's body: it copies the orders table into
// the copied table, with an upsert that counts the writes of each row,
// and checkpoints in a file; it prints each id once its write committed.
// Without the variable it does nothing.
func TestQueryKillChild(t *testing.T) {
	raw := os.Getenv(killChildEnv)
	if raw == "" {
		t.Skip("the kill test's child")
	}
	var c killChild
	require.NoError(t, json.Unmarshal([]byte(raw), &c))
	var (
		db     *sql.DB
		d      sluicesql.Dialect
		upsert string
	)
	copied := c.Prefix + "copied"
	switch c.Database {
	case "sqlite":
		db, d = openSQLiteFile(t, c.DSN), sluicesql.SQLite
		upsert = "INSERT INTO " + copied + " (id, name, writes) VALUES (?, ?, 1) ON CONFLICT (id) DO UPDATE SET writes = " + copied + ".writes + 1"
	case "postgres":
		db, d = openDSN(t, "pgx", c.DSN), sluicesql.Postgres
		upsert = "INSERT INTO " + copied + " (id, name, writes) VALUES ($1, $2, 1) ON CONFLICT (id) DO UPDATE SET writes = " + copied + ".writes + 1"
	case "mariadb":
		db, d = openDSN(t, "mysql", c.DSN), sluicesql.MySQL
		upsert = "INSERT INTO " + copied + " (id, name, writes) VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE writes = writes + 1"
	default:
		t.Fatalf("no database %q", c.Database)
	}
	store, err := checkpoint.OpenFile(filepath.Join(c.Dir, "checkpoint.json"))
	require.NoError(t, err)
	defer store.Close()
	b := pipeline.New("copy", pipeline.WithCheckpoint(store, 5*time.Millisecond))
	rows := pipeline.Source(b, "orders", sluicesql.Query[order](db, d, sluicesql.QueryOptions{
		Table: c.Prefix + "orders", Key: []string{"id"}, PageSize: 100}))
	pipeline.Sink(b, "copy", rows, node.SinkFunc[order](func(ctx context.Context, o order) error {
		_, err := db.ExecContext(ctx, upsert, o.ID, o.Name)
		if err == nil {
			fmt.Println(o.ID)
		}
		return err
	}))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	fmt.Println("done")
}

func openDSN(t testing.TB, driver, dsn string) *sql.DB {
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func openSQLiteFile(t testing.TB, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// A child copying a table is killed with SIGKILL three times, after a
// few hundred rows each; a fourth copies the rest, on each database.
// Every row is copied (none missed), each run starts at or before the row
// after the last one the run before wrote (none skipped) and well after
// the first (it resumed), and rows are written twice only between a kill
// and the checkpoint before it.
func TestQueryResumesAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, database := range databases {
		t.Run(database.name, func(t *testing.T) {
			db := database.open(t)
			d := database.dialect
			dir := t.TempDir()
			c := killChild{Database: database.name, Dir: dir, Prefix: tableName(t, db, d) + "_"}
			switch database.name {
			case "sqlite":
				// The child opens the test's database file: the one open
				// held the test's table name (it has no other).
				db = openSQLiteFile(t, filepath.Join(dir, "db"))
				c.DSN = filepath.Join(dir, "db")
			case "postgres":
				c.DSN = servicetest.Postgres(t)
			case "mariadb":
				c.DSN = mariaDBDSN(t)
			}
			for _, table := range []string{c.Prefix + "orders", c.Prefix + "copied"} {
				_, err := db.Exec("DROP TABLE IF EXISTS " + table)
				require.NoError(t, err)
				t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
			}
			createOrders(t, db, d, c.Prefix+"orders", killRows)
			_, err := db.Exec("CREATE TABLE " + c.Prefix + "copied (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, writes INTEGER NOT NULL)")
			require.NoError(t, err)

			last := int64(0)
			for round := range 4 {
				kill := round < 3
				first, end := runKillChild(t, c, kill, 200+round*100)
				require.LessOrEqual(t, first, last+1, "round %d starts at or before the row after the last one written", round)
				if round > 0 {
					assert.Greater(t, first, int64(1), "round %d resumed", round)
				}
				t.Logf("round %d: rows %d to %d", round, first, end)
				last = end
			}
			require.Equal(t, int64(killRows), last)

			var n, writes, twice int64
			require.NoError(t, db.QueryRow("SELECT COUNT(*), SUM(writes), SUM(CASE WHEN writes > 1 THEN 1 ELSE 0 END) FROM "+c.Prefix+"copied").Scan(&n, &writes, &twice))
			assert.Equal(t, int64(killRows), n, "every row copied")
			t.Logf("%d rows, %d writes, %d rows written more than once", n, writes, twice)
			assert.Less(t, writes, int64(killRows+3*300), "rows written again only after the last checkpoint of a killed run")
		})
	}
}

// runKillChild runs the child; when kill, it kills it with SIGKILL after
// it reported after rows. It returns the first and the last id the child
// reported.
func runKillChild(t *testing.T, c killChild, kill bool, after int) (first, last int64) {
	t.Helper()
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestQueryKillChild$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	n, done := 0, false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "done" {
			done = true
			continue
		}
		id, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			continue // the test framework's own lines
		}
		if n == 0 {
			first = id
		}
		last = id
		n++
		if kill && n == after {
			require.NoError(t, cmd.Process.Kill()) // SIGKILL: no deferred code runs
		}
	}
	err = cmd.Wait()
	if kill {
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "the child was killed: %v\n%s", err, stderr.String())
		require.Equal(t, "signal: killed", exit.Error(), stderr.String())
		require.GreaterOrEqual(t, n, after)
	} else {
		require.NoError(t, err, stderr.String())
		require.True(t, done, "the child's run ended")
	}
	return first, last
}
