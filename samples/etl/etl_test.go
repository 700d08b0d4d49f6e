package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/graphdoc"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
)

func TestMain(m *testing.M) {
	// The crash test runs this binary again as the child it kills.
	if os.Getenv(crashDirEnv) != "" {
		os.Exit(crashChild())
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeDemo()
		os.Exit(code)
	}))
}

// runOnFakeClock runs the job with cfg on a fake clock, moving it forward
// a millisecond each time the job waits on it.
func runOnFakeClock(t *testing.T, cfg config) summary {
	t.Helper()
	return runOnFakeClockWith(t, cfg, &bytes.Buffer{}, nil, nil)
}

// drainOn returns a runner that drains the run once drain is closed, as
// the command's first Ctrl-C does (nil: a runner that never drains). A
// drain asked for before the run started waits for it.
func drainOn(drain <-chan struct{}) runner {
	if drain == nil {
		return nil
	}
	return func(ctx context.Context, p *pipeline.Pipeline) (pipeline.Result, error) {
		done := make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			select {
			case <-drain:
			case <-done:
				return
			}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for !p.Drain() {
				select {
				case <-tick.C:
				case <-done:
					return
				}
			}
		}()
		defer func() {
			close(done)
			<-ended
		}()
		return p.Run(ctx)
	}
}

// runOnFakeClockWith is runOnFakeClock writing progress to w, calling
// paused, if not nil, once, the first time the job waits on the clock, and
// draining the job once drain is closed.
func runOnFakeClockWith(t *testing.T, cfg config, w io.Writer, paused func(), drain <-chan struct{}) summary {
	t.Helper()
	clock := clockwork.NewFakeClock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		s   summary
		err error
	}
	done := make(chan result, 1)
	// The job waits on the clock when something besides the clock's
	// standing tickers (the checkpoint's, the progress display's) does.
	waiters := 1
	if cfg.checkpointEvery > 0 {
		waiters++
	}
	if cfg.progress > 0 {
		waiters++
	}
	go func() {
		s, err := runETL(ctx, cfg, clock, w, drainOn(drain))
		done <- result{s, err}
	}()
	for {
		select {
		case r := <-done:
			require.NoError(t, r.err)
			return r.s
		default:
		}
		wctx, wcancel := context.WithCancel(ctx)
		go func() {
			select {
			case r := <-done:
				done <- r
				wcancel()
			case <-wctx.Done():
			}
		}()
		if clock.BlockUntilContext(wctx, waiters) == nil {
			if paused != nil {
				paused()
				paused = nil
			}
			clock.Advance(time.Millisecond)
		}
		wcancel()
	}
}

func testConfig(t *testing.T) config {
	dir := t.TempDir()
	// The outage is long in fake time: the clock moves whenever any part of
	// the job waits on it, so a short outage may see only a few calls, too
	// few to trip the breaker.
	cfg := config{
		rows: 3000, failRate: 0.1, outage: 5 * time.Second, outageAfter: 50 * time.Millisecond,
		latency: time.Millisecond, workers: 8, seed: 42, checkpointEvery: time.Second,
		db: filepath.Join(dir, "orders.db"), dlq: filepath.Join(dir, "dead-letters.jsonl"),
	}
	return cfg // runETL sets the input and checkpoint files beside the database
}

func TestETLEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := runOnFakeClock(t, cfg)

	read := s.node("read").Out
	loaded := s.node("validate").Out
	assert.Equal(t, int64(cfg.rows), read)
	assert.Equal(t, read, loaded+s.deadLettered(), "every row is loaded or dead-lettered")
	assert.Equal(t, loaded, s.inTable, "the table holds every valid order")
	assert.Equal(t, loaded, s.changed, "a fresh database gets every row")

	// The data set's own failures are fixed by its seed, and so are the
	// service's 503s: they depend on the order and its attempt, not on
	// which worker calls first.
	byWhy := s.byWhy()
	total := 0
	for _, n := range byWhy {
		total += n
	}
	assert.Equal(t, int(s.deadLettered()), total, "every dead letter has a reason")
	assert.Equal(t, seededFailures, dataFailures(byWhy), "the seed's malformed rows and broken rules")
	assert.Positive(t, s.retries(1), "the flaky service made items retry")
	// The service's one outage is one outage of the breaker, however many
	// of its probes failed: it opened on the trip and again on each failed
	// probe, and closed once the service was back.
	require.Len(t, s.outages, 1, "one outage of the service")
	o := s.outages[0]
	assert.Greater(t, o.failedProbes, 0, "a 5 s outage outlasts the breaker's 500 ms open time")
	assert.Equal(t, o.failedProbes+1, o.opened, "the trip, then each failed probe")
	assert.True(t, o.closed, "a probe succeeded once the service was back")

	// The dead-letter file holds exactly this run's dead letters.
	var envs []deadletter.Envelope
	for env, err := range deadletter.ReadFile(cfg.dlq) {
		require.NoError(t, err)
		envs = append(envs, env)
	}
	assert.Len(t, envs, int(s.deadLettered()))
	for _, env := range envs {
		assert.Equal(t, s.res.RunID, env.RunID)
		if env.OriginNode == "parse" {
			assert.Contains(t, env.ErrText, "malformed row", "a row that did not parse is kept as its line")
		} else {
			assert.Regexp(t, `^ord-\d{7}$`, env.CorrelationID, "an order names itself")
		}
	}

	// The customers' totals agree with the orders loaded, customer by
	// customer and day by day, on the orders' own dates.
	assertTotalsMatchOrders(t, cfg.db)
	assertDaysSpread(t, cfg.db)
	assert.Positive(t, s.totals.days)
	// The rows entered late are late, and only they: each valid order
	// dated more than a day before the latest date of the valid orders
	// above it in the file.
	late := lateInFile(t, s.cfg.input, cfg.db)
	assert.NotEmpty(t, late, "the data set has late rows")
	assert.Equal(t, late, lateOrders(t, cfg.db))
	assert.Equal(t, int64(len(late)), s.node("days").Late)
	assert.Equal(t, int64(len(late)), s.totals.late)

	// The summary says all of it.
	var out bytes.Buffer
	s.print(&out)
	text := out.String()
	assert.Contains(t, text, "Sluice ETL demo: 3000 rows")
	assert.Contains(t, text, "starting at the first row of 3000 (no checkpoint yet)")
	assert.Regexp(t, regexp.MustCompile(`read\s+3000\s+rows read: 1 to 3000 of 3000`), text)
	assert.Regexp(t, regexp.MustCompile(`dead-lettered\s+`+strconv.FormatInt(s.deadLettered(), 10)), text)
	assert.Contains(t, text, "go run ./cmd/sluice dlq stats "+cfg.dlq)
	assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`breaker\s+1\s+outage: the enrich breaker opened %d times \(%d failed probes?\), closed;`, o.opened, o.failedProbes)), text)
	assert.Regexp(t, regexp.MustCompile(`totals\s+`+strconv.FormatInt(s.totals.days, 10)+`\s+customer-days' order counts and euro totals in customer_day_totals, by each order's own date, gathered by day windows on those dates \(largest: `+s.totals.top+` on `+s.totals.topDay+`, `), text)
	assert.Regexp(t, regexp.MustCompile(`late\s+`+strconv.Itoa(len(late))+`\s+orders dated before the day windows' watermark, a day behind the latest date: added to their day's total from day_orders \(`+strconv.Itoa(len(late))+` in the table\)`), text)

	// A second run reads nothing: the checkpoint holds the end of the
	// file. It says so, and leaves the tables as they were.
	again := runOnFakeClock(t, cfg)
	assert.Zero(t, again.read())
	assert.Zero(t, again.changed)
	assert.Equal(t, s.inTable, again.inTable)
	assert.Equal(t, s.totals, again.totals, "the totals are as the first run left them")
	assert.Zero(t, again.node("days").Late)
	out.Reset()
	again.print(&out)
	assert.Contains(t, out.String(), "nothing to read: earlier runs read all 3000 rows (-fresh starts over)")

	// -fresh starts over: it clears the tables and loads every valid row
	// again, so the table holds what this run loaded, as a first run's
	// does: the first run's orders, and any it could not load because the
	// service was unavailable (under OpenPause an outage holds the job
	// back, so there are few or none).
	cfg.fresh = true
	fresh := runOnFakeClock(t, cfg)
	assert.Equal(t, int64(cfg.rows), fresh.read())
	assert.Contains(t, fresh.at.String(), "starting at the first row of 3000 (-fresh)")
	unavailable := int64(total)
	for _, n := range dataFailures(byWhy) {
		unavailable -= int64(n)
	}
	assert.Equal(t, fresh.changed, fresh.inTable, "the cleared table gets every row again")
	assert.Equal(t, fresh.node("validate").Out, fresh.inTable)
	assert.GreaterOrEqual(t, fresh.inTable, s.inTable)
	assert.LessOrEqual(t, fresh.inTable-s.inTable, unavailable)
	assert.Equal(t, seededFailures, dataFailures(fresh.byWhy()), "the same rows fail for the same reasons")

	// The first run's letters were rotated away, and the file holds what
	// the fresh run wrote: no second envelope for a row the rotated file
	// holds already.
	assert.Equal(t, fresh.deadLettered(), fresh.letters.Writes+fresh.letters.Duplicates)
	assert.GreaterOrEqual(t, fresh.letters.Duplicates, int64(len(seededFailures)), "the rows that fail for their content are there already")
	n := 0
	for env, err := range deadletter.ReadFile(cfg.dlq) {
		require.NoError(t, err)
		assert.Equal(t, fresh.res.RunID, env.RunID)
		n++
	}
	assert.Equal(t, int(fresh.letters.Writes), n)
	all := 0
	for _, err := range deadletter.ReadAll(cfg.dlq) {
		require.NoError(t, err)
		all++
	}
	assert.Equal(t, int(s.deadLettered()+fresh.letters.Writes), all)
}

// assertTotalsMatchOrders checks that customer_day_totals, which the
// pipeline's day windows and late orders fill, holds for every customer
// and day the count and euro sum of the customer's rows of that date in
// orders: a recomputation in SQL, from the table the load step filled.
func assertTotalsMatchOrders(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	query := func(q string) map[string]total {
		rows, err := db.QueryContext(t.Context(), q)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]total{}
		for rows.Next() {
			var c string
			var v total
			require.NoError(t, rows.Scan(&c, &v.Orders, &v.EURCents))
			out[c] = v
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := query("SELECT customer || ' ' || day, count(*), sum(eur_cents) FROM orders GROUP BY customer, day")
	got := query("SELECT customer || ' ' || day, orders, eur_cents FROM customer_day_totals")
	require.NotEmpty(t, want)
	assert.Equal(t, want, got)
}

// assertDaysSpread checks that customer_day_totals in the database at
// path is by the orders' own dates, spread over 30 days, not the day of
// the run.
func assertDaysSpread(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var days int
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT count(DISTINCT day) FROM customer_day_totals").Scan(&days))
	assert.Greater(t, days, 20, "the orders' own dates, spread over 30 days, not the day of the run")
}

// lateInFile returns the ids of the orders of the orders file at input
// that the database at path holds (the valid ones) and that are dated
// more than maxDisorder before the latest date of those above them: the
// rows the day windows take as late, recomputed from the file.
func lateInFile(t *testing.T, input, path string) map[string]bool {
	t.Helper()
	loaded := map[string]bool{}
	for _, id := range dump(t, path, "SELECT id FROM orders") {
		loaded[id] = true
	}
	f, err := os.Open(input)
	require.NoError(t, err)
	defer f.Close()
	late := map[string]bool{}
	var latest time.Time
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if !loaded[fields[0]] {
			continue
		}
		date, err := time.Parse(time.DateOnly, fields[4])
		require.NoError(t, err)
		switch {
		case latest.IsZero() || date.After(latest):
			latest = date
		case date.Before(latest.Add(-maxDisorder)):
			late[fields[0]] = true
		}
	}
	require.NoError(t, sc.Err())
	return late
}

// lateOrders returns the ids of the late orders day_orders holds in the database at path.
func lateOrders(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, id := range dump(t, path, "SELECT id FROM day_orders WHERE late") {
		out[id] = true
	}
	return out
}

// seededFailures are the dead letters that seed 42's 3000 rows cause by
// their content, by reason.
var seededFailures = map[string]int{
	"malformed row: fields":                      4,
	"malformed row: date":                        5,
	"malformed row: amount":                      5,
	"rule: amount must be positive":              8,
	"rule: amount must be at most 1 000 000 EUR": 4,
	"rule: date must not be in the future":       6,
	"unknown currency":                           3,
}

// dataFailures keeps the reasons of byWhy that the rows' content causes.
func dataFailures(byWhy map[string]int) map[string]int {
	out := map[string]int{}
	for why, n := range byWhy {
		if !strings.HasPrefix(why, "exchange rates unavailable") {
			out[why] = n
		}
	}
	return out
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"-help"}, &bytes.Buffer{}, &stderr))
	for _, flag := range []string{"-rows", "-fail-rate", "-outage", "-db", "-dlq", "-metrics-addr", "-seed", "-input", "-checkpoint-every", "-fresh"} {
		assert.Contains(t, stderr.String(), flag)
	}
	stderr.Reset()
	assert.Equal(t, 2, run(t.Context(), []string{"-fail-rate", "2"}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "-fail-rate 2: must be in [0, 1]")
	stderr.Reset()
	assert.Equal(t, 2, run(t.Context(), []string{"extra"}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), `unexpected argument "extra"`)
	// Each negative duration is named by its flag: they shared one
	// message that named none (a review's finding).
	for _, f := range []string{"-outage", "-outage-after", "-latency", "-progress", "-checkpoint-every"} {
		stderr.Reset()
		assert.Equal(t, 2, run(t.Context(), []string{f, "-1s"}, &bytes.Buffer{}, &stderr))
		assert.Contains(t, stderr.String(), f+" -1s: must not be negative")
	}
}

// TestDemoCommand builds the program and runs it as make demo does, with
// no flags, in an empty folder: it must succeed and print its summary.
func TestDemoCommand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the whole demo; skipped with -short")
	}
	dir := t.TempDir()
	cmd := exec.Command(buildDemo(t))
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	assert.Contains(t, stdout.String(), "Sluice ETL demo: 100000 rows")
	assert.Contains(t, stdout.String(), "starting at the first row of 100000 (no checkpoint yet)")
	assert.Contains(t, stdout.String(), "Inspect the dead letters")
	for _, f := range []string{"sluice-demo/orders.db", "sluice-demo/dead-letters.jsonl", "sluice-demo/pipeline.mmd",
		"sluice-demo/orders-100000-seed1.csv", "sluice-demo/checkpoint.json"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err, f)
	}
}

// lockedBuffer is a bytes.Buffer safe for the job and the test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestMetricsWhileRunning(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 500
	cfg.metricsAddr = "127.0.0.1:0"
	out := &lockedBuffer{}
	var scraped string
	runOnFakeClockWith(t, cfg, out, func() {
		// The job is running and waits on the clock: scrape it over HTTP.
		addr := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindStringSubmatch(out.String())
		require.Len(t, addr, 2, out.String())
		resp, err := http.Get(addr[1])
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		scraped = string(body)
	}, nil)
	assert.Contains(t, scraped, `sluice_items_in_total{node="parse",pipeline="orders-etl"}`)
	assert.Contains(t, scraped, `sluice_circuit_state{node="enrich",pipeline="orders-etl"}`)
	assert.Regexp(t, `(?m)^metrics on http://127\.0\.0\.1:`, out.String())
}

// byWhy returns the run's dead letters by reason, over every node.
func (s summary) byWhy() map[string]int {
	out := map[string]int{}
	for _, r := range s.reasons {
		out[r.why] += r.n
	}
	return out
}

// The first Ctrl-C drains the job: it stops reading rows, every row it read
// reaches its outcome (loaded or dead-lettered), and the summary says so.
func TestDrainStopsReadingAndSettlesWhatWasRead(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	// 3000 rows: the first run drains after the few hundred rows read by
	// the time the job first waits on the clock and the drain lands (72
	// to 704 seen in 10 runs), and the second reads the rest. 10 000 made
	// the second run the bulk of the test's 8 to 12 s, for nothing it
	// checks.
	cfg.rows = 3000
	drain := make(chan struct{})
	out := &lockedBuffer{}
	s := runOnFakeClockWith(t, cfg, out, func() { close(drain) }, drain)
	read := s.read()
	assert.True(t, s.drained)
	assert.NoError(t, s.stopped)
	assert.Less(t, read, int64(cfg.rows), "it stopped reading")
	t.Logf("drained after row %d", read)
	assert.Equal(t, read, s.node("validate").Out+s.deadLettered(), "every row read was loaded or dead-lettered")
	assert.Equal(t, s.node("validate").Out, s.inTable, "and the table holds the loaded ones")
	assertTotalsMatchOrders(t, cfg.db) // the drain handed the open days on, Partial, and they were written
	var buf bytes.Buffer
	s.print(&buf)
	assert.Contains(t, buf.String(), fmt.Sprintf("drained: it stopped reading after row %d of 3000", read))

	// The drain saved the position of the last row read, as every row
	// read reached its outcome: the next run resumes right after it, and
	// reads each row once over the two runs.
	rest := runOnFakeClock(t, cfg)
	assert.Equal(t, startPoint{after: read, of: 3000, why: "checkpoint " + filepath.Join(filepath.Dir(cfg.db), "checkpoint.json")}, rest.at)
	assert.Equal(t, int64(cfg.rows)-read, rest.read())
	assert.Equal(t, rest.node("validate").Out, rest.changed, "no row of the first run loaded again")
	assert.Equal(t, s.inTable+rest.changed, rest.inTable)
	assert.Zero(t, rest.letters.Duplicates, "no row of the first run dead-lettered again")
	assertTotalsMatchOrders(t, cfg.db)
	n := 0
	for _, err := range deadletter.ReadAll(cfg.dlq) {
		require.NoError(t, err)
		n++
	}
	assert.Equal(t, int(s.deadLettered()+rest.deadLettered()), n, "one file set, each dead letter once")
	buf.Reset()
	rest.print(&buf)
	assert.Contains(t, buf.String(), fmt.Sprintf("resumed after row %d of 3000 (checkpoint ", read))
	assert.Contains(t, buf.String(), fmt.Sprintf("rows read: %d to 3000 of 3000", read+1))
}

// The job writes its pipeline's graph, with the run's counts, beside the
// database, and the file parses as the flowchart Graph writes.
func TestGraphFileBesideTheDatabase(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 300
	cfg.db = filepath.Join(t.TempDir(), "elsewhere", "orders.db")
	s := runOnFakeClock(t, cfg)

	raw, err := os.ReadFile(filepath.Join(filepath.Dir(cfg.db), "pipeline.mmd"))
	require.NoError(t, err)
	f, err := graphdoc.ParseMermaid(string(raw))
	require.NoError(t, err)
	labels := map[string]string{}
	for _, n := range f.Nodes {
		labels[strings.SplitN(n.Label, "\n", 2)[0]] = n.Label
	}
	for _, n := range s.res.Nodes {
		assert.Contains(t, labels, n.Node)
	}
	assert.Contains(t, labels["read"], "\nout 300")
	// In the file's order, for the day windows' watermark.
	assert.Contains(t, labels["enrich"], "transform · ×8 · retry 4, node retry 3, breaker, dead letter\n")
	assert.Contains(t, labels["load"], fmt.Sprintf("\nin %d · out %d", s.node("load").In, s.node("load").Out))
	assert.Contains(t, string(raw), "    %% counts of run "+s.res.RunID+"\n")
	assert.Len(t, f.Edges, len(s.res.Nodes)-1, "a tree: every node but the source has one input")
	assert.Contains(t, f.Edges, graphdoc.Edge{From: "n3_validate", To: "n4_load", Label: "64 · broadcast"})
	assert.Contains(t, f.Edges, graphdoc.Edge{From: "n3_validate", To: "n5_days", Label: "64 · broadcast"})
	assert.Contains(t, labels["days"], fmt.Sprintf("\nin %d · out %d", s.node("validate").Out, s.node("days").Out))
}

// docs/graph.md embeds the demo's graph, as make demo builds it with its
// default flags, and it is what Graph renders now.
func TestDocGraph(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	p, _, _, err := build(cfg, clockwork.NewFakeClock(), deadletter.NewMemory(1), observer.Nop{}, checkpoint.NewMemory())
	require.NoError(t, err)
	graphdoc.Embedded(t, filepath.Join("..", "..", "docs", "graph.md"), "samples/etl", p.Graph().Mermaid())
}
