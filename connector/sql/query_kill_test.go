package sql_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
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
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// The kill test runs its own test binary as a child process that copies
// a table until it is killed; the child finds its database and
// checkpoint file through this variable.
const killChildEnv = "SLUICE_SQL_KILL_CHILD"

// killRows is the size of the table the child copies; the race
// detector's child is slower.
var killRows = map[bool]int{false: 2500, true: 1200}[raceEnabled]

// TestQueryKillChild is the child's body: it copies the orders of
// $SLUICE_SQL_KILL_CHILD/db into the copied table, with an upsert that
// counts the writes of each row, and checkpoints in a file; it prints
// each id once its write committed. Without the variable it does nothing.
func TestQueryKillChild(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		t.Skip("the kill test's child")
	}
	db := openSQLiteFile(t, filepath.Join(dir, "db"))
	store, err := checkpoint.OpenFile(filepath.Join(dir, "checkpoint.json"))
	require.NoError(t, err)
	defer store.Close()
	b := pipeline.New("copy", pipeline.WithCheckpoint(store, 5*time.Millisecond))
	rows := pipeline.Source(b, "orders", sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{
		Table: "orders", Key: []string{"id"}, PageSize: 100}))
	pipeline.Sink(b, "copy", rows, node.SinkFunc[order](func(ctx context.Context, o order) error {
		_, err := db.ExecContext(ctx, "INSERT INTO copied (id, name, writes) VALUES (?, ?, 1) "+
			"ON CONFLICT (id) DO UPDATE SET writes = writes + 1", o.ID, o.Name)
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

func openSQLiteFile(t testing.TB, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// A child copying a table is killed with SIGKILL three times, after a
// few hundred rows each; a fourth copies the rest. Every row is copied
// (none missed), each run starts at or before the row after the last one
// the run before wrote (none skipped) and well after the first (it
// resumed), and rows are written twice only between a kill and the
// checkpoint before it.
func TestQueryResumesAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	db := openSQLiteFile(t, filepath.Join(dir, "db"))
	createOrders(t, db, sluicesql.SQLite, "orders", killRows)
	_, err := db.Exec("CREATE TABLE copied (id BIGINT PRIMARY KEY, name TEXT NOT NULL, writes INTEGER NOT NULL)")
	require.NoError(t, err)

	last := int64(0)
	for round := range 4 {
		kill := round < 3
		first, end := runKillChild(t, dir, kill, 200+round*100)
		require.LessOrEqual(t, first, last+1, "round %d starts at or before the row after the last one written", round)
		if round > 0 {
			assert.Greater(t, first, int64(1), "round %d resumed", round)
		}
		t.Logf("round %d: rows %d to %d", round, first, end)
		last = end
	}
	require.Equal(t, int64(killRows), last)

	var n, writes, twice int64
	require.NoError(t, db.QueryRow("SELECT COUNT(*), SUM(writes), SUM(CASE WHEN writes > 1 THEN 1 ELSE 0 END) FROM copied").Scan(&n, &writes, &twice))
	assert.Equal(t, int64(killRows), n, "every row copied")
	t.Logf("%d rows, %d writes, %d rows written more than once", n, writes, twice)
	assert.Less(t, writes, int64(killRows+3*300), "rows written again only after the last checkpoint of a killed run")
}

// runKillChild runs the child; when kill, it kills it with SIGKILL after
// it reported after rows. It returns the first and the last id the child
// reported.
func runKillChild(t *testing.T, dir string, kill bool, after int) (first, last int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestQueryKillChild$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
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
