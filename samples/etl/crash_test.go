package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// The crash test runs its own test binary as a child process that runs a
// CSV -> transform -> SQLite pipeline with a checkpoint, and kills it
// with SIGKILL. The child learns its folder and its run's number from
// these variables.
const (
	crashDirEnv  = "SLUICE_ETL_CRASH_DIR"
	crashRunEnv  = "SLUICE_ETL_CRASH_RUN"
	crashSeedEnv = "SLUICE_ETL_CRASH_SEED" // set to repeat a test's kill moments
)

// crashRows is the number of rows of the crash test's input: enough that
// 20 kills leave rows for the last run.
var crashRows = 40_000

func init() {
	if raceEnabled {
		crashRows = 4_000
	}
}

const (
	crashBatch = 50                    // rows per SQLite transaction
	crashEvery = 20 * time.Millisecond // the child's checkpoint interval
)

// crashRow returns row i (1-based) of the crash test's input: "i,value".
// Every 300th row has a value that does not parse (the transform
// dead-letters it), and every 997th is not CSV (the source dead-letters
// it); the rest are good rows.
func crashRow(i int) (line string, good bool) {
	switch {
	case i%997 == 3:
		return fmt.Sprintf("%d,x\"y", i), false // a bare quote
	case i%300 == 7:
		return fmt.Sprintf("%d,seven", i), false
	}
	return fmt.Sprintf("%d,%d", i, i*3), true
}

// crashChild runs the pipeline on $SLUICE_ETL_CRASH_DIR/in.csv to the
// end, and returns the exit code; it is normally killed long before. It
// prints "resumed R" once it knows it resumes after row R, and "wrote N"
// after each transaction, N being the rows it wrote so far. The SQLite
// file holds each good row once, with how many times it was written
// (attempts), and a log of every write with the run and the time; after
// each checkpoint save that returned, saves.log gets the run and the time
// the save began.
func crashChild() int {
	dir := os.Getenv(crashDirEnv)
	run, err := strconv.Atoi(os.Getenv(crashRunEnv))
	if err == nil {
		err = runCrashChild(context.Background(), dir, run)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 1
	}
	return 0
}

func runCrashChild(ctx context.Context, dir string, run int) error {
	input := filepath.Join(dir, "in.csv")
	cp, err := checkpoint.OpenFile(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		return err
	}
	defer cp.Close()
	pos, err := cp.Load(ctx, "crash", "read")
	if err != nil {
		return err
	}
	total, err := rowsAfter(ctx, input, nil)
	if err != nil {
		return err
	}
	left, err := rowsAfter(ctx, input, pos)
	if err != nil {
		return err
	}
	fmt.Printf("resumed %d\n", total-left)
	saves, err := os.OpenFile(filepath.Join(dir, "saves.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer saves.Close()
	dlq, err := deadletter.OpenFile(filepath.Join(dir, "dead-letters.jsonl"))
	if err != nil {
		return err
	}
	defer dlq.Close()

	b := pipeline.New("crash",
		pipeline.WithCheckpoint(&loggedStore{cp, saves, run}, crashEvery),
		pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	rows := pipeline.Source(b, "read", file.CSV(input, file.CSVOptions{Header: true, FieldsPerRecord: -1}))
	parsed := pipeline.Transform(b, "parse", rows, node.TransformFunc[file.Record, [2]int64](func(_ context.Context, r file.Record) ([2]int64, error) {
		if len(r.Fields) != 2 {
			return [2]int64{}, resilience.MarkPermanent(fmt.Errorf("line %d: want 2 fields", r.Line))
		}
		id, err := strconv.ParseInt(r.Fields[0], 10, 64)
		if err != nil {
			return [2]int64{}, resilience.MarkPermanent(err)
		}
		v, err := strconv.ParseInt(r.Fields[1], 10, 64)
		if err != nil {
			return [2]int64{}, resilience.MarkPermanent(fmt.Errorf("row %d: value: %w", id, err))
		}
		return [2]int64{id, v}, nil
	}))
	batches := pipeline.Batch(b, "batch", parsed, crashBatch, 10*time.Millisecond)
	pipeline.Sink[[][2]int64](b, "load", batches, &crashSink{path: filepath.Join(dir, "out.db"), run: run})
	p, err := b.Build()
	if err != nil {
		return err
	}
	_, err = p.Run(ctx)
	return err
}

// loggedStore is a checkpoint store that logs, after each save that
// returned nil, the run and the time the save began.
type loggedStore struct {
	checkpoint.Store
	log *os.File
	run int
}

func (s *loggedStore) Save(ctx context.Context, pipeline, source string, pos []byte) error {
	began := time.Now().UnixNano()
	if err := s.Store.Save(ctx, pipeline, source, pos); err != nil {
		return err
	}
	// One write(2) of a short line: whole in the file even if the process
	// is killed right after.
	_, err := fmt.Fprintf(s.log, "%d %d\n", s.run, began)
	return err
}

// crashSink writes each batch in one transaction: an upsert per row that
// counts its attempts, and a line per row in an insert-only log.
type crashSink struct {
	path  string
	run   int
	db    *sql.DB
	wrote int
}

func (s *crashSink) Open(ctx context.Context) error {
	db, err := sql.Open("sqlite", "file:"+s.path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, attempts INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS writes (run INTEGER NOT NULL, id INTEGER NOT NULL, at INTEGER NOT NULL)`); err != nil {
		db.Close()
		return err
	}
	s.db = db
	return nil
}

func (s *crashSink) Close(context.Context) error { return s.db.Close() }

func (s *crashSink) Write(ctx context.Context, batch [][2]int64) error {
	at := time.Now().UnixNano() // before the commit: a row is never logged later than it landed
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, r := range batch {
		if _, err := tx.ExecContext(ctx, `INSERT INTO rows (id, v, attempts) VALUES (?, ?, 1)
ON CONFLICT (id) DO UPDATE SET v = excluded.v, attempts = attempts + 1`, r[0], r[1]); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO writes (run, id, at) VALUES (?, ?, ?)`, s.run, r[0], at); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.wrote += len(batch)
	fmt.Printf("wrote %d\n", s.wrote)
	return nil
}

// TestCrashProof kills a child running a CSV -> transform -> SQLite
// pipeline with a checkpoint 20 times, at random moments, and runs it
// again until it finishes. Then every good row is in the table once, with
// its value; every bad row is dead-lettered once; and after each kill the
// rows written again are at most those the killed run wrote after the
// start of its last checkpoint save that returned, plus what was in
// flight: two batches (one being written or settling when the position
// was taken, one more written between taking it and the save's start).
// As saves run every crashEvery, that is one interval's rows plus two
// batches.
func TestCrashProof(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("%s=%d", crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	kills := 20
	if testing.Short() {
		kills = 5
	}

	dir := t.TempDir()
	var in strings.Builder
	in.WriteString("id,value\n")
	good, bad := map[int64]int64{}, map[int]bool{}
	for i := 1; i <= crashRows; i++ {
		line, ok := crashRow(i)
		in.WriteString(line + "\n")
		if ok {
			good[int64(i)] = int64(i * 3)
		} else {
			bad[i] = true
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.csv"), []byte(in.String()), 0o600))

	// Kill each run once it reported a random number of rows written (0:
	// as soon as it starts), then after a random delay of up to 10 ms, so
	// that kills land anywhere: before the first write, mid-transaction,
	// mid-save.
	var resumed []int64 // the row each run resumed after
	for run := 0; ; run++ {
		killAfter := -1 // the last run is not killed
		if run < kills {
			killAfter = rng.IntN(crashRows / 24)
		}
		r, finished := startCrashChild(t, dir, run, killAfter, time.Duration(rng.IntN(10_000))*time.Microsecond)
		resumed = append(resumed, r)
		if finished {
			require.GreaterOrEqual(t, run, kills, "a run finished before it was killed; the input is too small")
			break
		}
	}
	require.Len(t, resumed, kills+1)

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "out.db")+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()

	// Every good row is in the table once, with its value; no bad row is.
	got := map[int64]int64{}
	var attempts int64
	rows, err := db.QueryContext(t.Context(), `SELECT id, v, attempts FROM rows`)
	require.NoError(t, err)
	for rows.Next() {
		var id, v, a int64
		require.NoError(t, rows.Scan(&id, &v, &a))
		got[id] = v
		attempts += a
	}
	require.NoError(t, rows.Err())
	rows.Close()
	assert.Equal(t, good, got, "every good row once, with its value")

	// Every bad row is dead-lettered once over the file set, though runs
	// read some of them again after a kill.
	letters := map[int]int{}
	for env, err := range deadletter.ReadAll(filepath.Join(dir, "dead-letters.jsonl")) {
		require.NoError(t, err)
		assert.NotEmpty(t, env.Position, "an envelope carries its source position")
		// The source dead-letters a row that is not CSV as its text, the
		// transform one that does not parse as the record.
		raw, ok := env.Item.(json.RawMessage)
		require.True(t, ok, "an item read back is raw JSON")
		var text string
		if json.Unmarshal(raw, &text) != nil {
			var r file.Record
			require.NoError(t, json.Unmarshal(raw, &r))
			text = strings.Join(r.Fields, ",")
		}
		id, err := strconv.Atoi(strings.SplitN(text, ",", 2)[0])
		require.NoError(t, err, "item %s", env.Item)
		letters[id]++
	}
	for id := range bad {
		assert.Equal(t, 1, letters[id], "bad row %d dead-lettered once", id)
	}
	assert.Len(t, letters, len(bad))

	// The rows written again after kill k are those run k wrote past the
	// row run k+1 resumed after.
	saves := readSaves(t, filepath.Join(dir, "saves.log"))
	var again int64
	for k := 0; k < kills; k++ {
		var rewritten, uncovered, wrote int64
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM writes WHERE run = ? AND id > ?`, k, resumed[k+1]).Scan(&rewritten))
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM writes WHERE run = ?`, k).Scan(&wrote))
		last, saved := saves[k]
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM writes WHERE run = ? AND at > ?`, k, last).Scan(&uncovered))
		bound := uncovered + 2*crashBatch
		t.Logf("kill %2d: resumed after %5d, wrote %5d, saved: %-5v, wrote after its last save %5d, written again %5d (bound %d)",
			k, resumed[k], wrote, saved, uncovered, rewritten, bound)
		assert.LessOrEqual(t, rewritten, bound, "kill %d: rows written again", k)
		assert.GreaterOrEqual(t, resumed[k+1], resumed[k], "kill %d: a run never resumes before the one it follows", k)
		again += rewritten
	}
	// The counters agree: each write past the first of a row is one of
	// the rows written again after some kill.
	var writes int64
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM writes`).Scan(&writes))
	assert.Equal(t, writes-int64(len(good)), again, "the log's extra writes are the rows written again")
	assert.Equal(t, writes, attempts, "the attempts counters and the log agree")
	assert.Less(t, resumed[0], resumed[kills], "the kills did not stop progress")
}

// startCrashChild runs the child for run in dir and kills it with SIGKILL
// once it reported killAfter rows written and delay passed (never when
// killAfter is negative). It returns the row the child resumed after, and
// whether it finished.
func startCrashChild(t *testing.T, dir string, run, killAfter int, delay time.Duration) (resumed int64, finished bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRunEnv+"="+strconv.Itoa(run))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	resumed = -1
	var timer *time.Timer
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		wrote := 0
		if n, ok := strings.CutPrefix(line, "resumed "); ok {
			resumed, err = strconv.ParseInt(n, 10, 64)
			require.NoError(t, err)
		} else if n, ok := strings.CutPrefix(line, "wrote "); ok {
			wrote, err = strconv.Atoi(n)
			require.NoError(t, err)
		} else {
			t.Fatalf("run %d: the child printed %q", run, line)
		}
		if killAfter >= 0 && timer == nil && wrote >= killAfter {
			// SIGKILL: no deferred code runs, nothing is flushed.
			timer = time.AfterFunc(delay, func() { cmd.Process.Kill() })
		}
	}
	require.NoError(t, sc.Err())
	err = cmd.Wait()
	require.GreaterOrEqual(t, resumed, int64(0), "run %d: %v\n%s", run, err, stderr.String())
	if timer == nil || killAfter < 0 {
		require.NoError(t, err, "run %d\n%s", run, stderr.String())
		return resumed, true
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Error() == "signal: killed" {
		return resumed, false
	}
	// It finished within the delay.
	require.NoError(t, err, "run %d\n%s", run, stderr.String())
	return resumed, true
}

// readSaves returns, by run, the time the last save that returned began.
func readSaves(t *testing.T, path string) map[int]int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[int]int64{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var run int
		var at int64
		_, err := fmt.Sscanf(l, "%d %d", &run, &at)
		require.NoError(t, err, "line %q", l)
		out[run] = max(out[run], at)
	}
	return out
}
