// Command etl is Sluice's demo: an ETL job on embedded defaults, with no
// server to install. It writes an orders data set (with some malformed
// rows) from a fixed seed to a CSV file, once, and reads it with
// file.CSV; it parses each row, converts its amount to euro through a
// simulated exchange-rate HTTP API (answered in-process, read with
// resilience/httpretry) that is slow, fails now and then and goes down
// for a few seconds, checks business rules, and loads the
// orders into a SQLite file in batches with upserts. Beside the load,
// event-time windows of a day on each order's own date gather each
// customer's orders per day into a table beside it, with the orders
// entered late (dated behind the windows' watermark) marked late, and a
// view counts and sums them per customer and day. What fails for good lands in a
// dead-letter file next to the database, and the pipeline's graph with the
// run's counts in pipeline.mmd (Mermaid), next to it too.
//
// The job keeps a checkpoint beside the database: the position in the
// file up to which every row reached its outcome, saved every second.
// Kill it (even with kill -9) and run it again: it resumes after the last
// position saved, and ends with the same tables and dead letters as a run
// that was never interrupted. A run after one that finished reads nothing;
// -fresh starts over at the first row.
//
//	go run ./samples/etl            # what make demo runs
//	go run ./samples/etl -help
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
)

// config is what the flags set.
type config struct {
	rows        int
	failRate    float64
	outage      time.Duration
	outageAfter time.Duration
	latency     time.Duration
	workers     int
	db, dlq     string
	// input is the orders file; generated says it is the default one,
	// written from rows and seed when missing.
	input     string
	generated bool
	// checkpoint is the checkpoint file, saved every checkpointEvery (0:
	// no checkpoint); fresh removes it first.
	checkpoint      string
	checkpointEvery time.Duration
	fresh           bool
	metricsAddr     string
	inspectAddr     string // serve the live inspector page here; "" serves none
	seed            uint64
	progress        time.Duration // 0: no progress display
	tty             bool          // redraw the progress in place instead of printing lines
	// stopHalfway, in tests, stops a start over after its first step, as
	// a kill there would.
	stopHalfway bool
}

// main runs the job. The first Ctrl-C (or SIGTERM) drains it: no more
// rows are read, and every row read reaches its outcome; a second one
// cancels it at once (see pipeline.RunUntilSignal). Either way a partial
// summary is printed.
func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command with args and returns its exit status: 0 when the
// job ran (dead letters included) or was drained, 1 when it failed or was
// cancelled, 2 for bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "etl:", err)
		return 2
	}
	cfg.tty = isTerminal(stdout)
	untilSignal := func(ctx context.Context, p *pipeline.Pipeline) (pipeline.Result, error) {
		fmt.Fprintln(stdout, "etl: running: Ctrl-C drains the job (every row read reaches its outcome); Ctrl-C again stops it at once")
		return pipeline.RunUntilSignal(ctx, p) // os.Interrupt and SIGTERM
	}
	sum, err := runETL(ctx, cfg, clockwork.NewRealClock(), stdout, untilSignal)
	if sum.res.RunID != "" {
		sum.print(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "etl:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("etl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.rows, "rows", 100_000, "how many order rows to generate")
	fs.StringVar(&cfg.input, "input", "", "orders CSV file to read (default: orders-ROWS-seedSEED.csv next to the database, written from -rows and -seed when missing)")
	fs.DurationVar(&cfg.checkpointEvery, "checkpoint-every", time.Second, "how often to save the position read up to in checkpoint.json next to the database (0: no checkpoint: each run clears the tables and reads every row)")
	fs.BoolVar(&cfg.fresh, "fresh", false, "start over at the first row: remove the checkpoint and rotate the dead letters")
	fs.Float64Var(&cfg.failRate, "fail-rate", 0.05, "share of exchange-rate calls that fail with HTTP 503 (transient)")
	fs.DurationVar(&cfg.outage, "outage", 3*time.Second, "how long the exchange-rate service is down (0: no outage)")
	fs.DurationVar(&cfg.outageAfter, "outage-after", time.Second, "when the outage starts, from the start of the run")
	fs.DurationVar(&cfg.latency, "latency", time.Millisecond, "mean latency of an exchange-rate call")
	fs.IntVar(&cfg.workers, "workers", 64, "exchange-rate calls in flight at once (Parallel of the enrich step)")
	fs.StringVar(&cfg.db, "db", filepath.Join("sluice-demo", "orders.db"), "SQLite database file to load into (created if missing)")
	fs.StringVar(&cfg.dlq, "dlq", "", "dead-letter file (default: dead-letters.jsonl next to the database)")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address while the job runs, such as 127.0.0.1:9464")
	fs.StringVar(&cfg.inspectAddr, "inspect-addr", "", "serve the live inspector page (read-only) on this address while the job runs, such as 127.0.0.1:9465")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the data set, the failures and the jitter")
	fs.DurationVar(&cfg.progress, "progress", 200*time.Millisecond, "how often to redraw the progress on a terminal; elsewhere a line every 2s, or this if longer (0: no progress)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: etl [flags]

Sluice's demo ETL job: read orders from a CSV file (generated once), parse,
convert to euro through a flaky exchange-rate service (item retries with
jittered backoff, a circuit breaker that pauses through its outage),
validate, and load into SQLite with upserts; gather each customer's orders
per day of their date in event-time windows, late orders included, and
sum them per customer and day. Rows that
fail for good go to
a dead-letter file; inspect it with go run ./cmd/sluice dlq stats FILE.
A checkpoint next to the database lets a run that was killed or stopped
resume where it stopped; -fresh starts over.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (see -help)", fs.Arg(0))
	}
	switch {
	case cfg.rows < 0:
		return cfg, fmt.Errorf("-rows %d: must not be negative", cfg.rows)
	case cfg.workers < 1:
		return cfg, fmt.Errorf("-workers %d: must be at least 1", cfg.workers)
	case cfg.failRate < 0 || cfg.failRate > 1:
		return cfg, fmt.Errorf("-fail-rate %g: must be in [0, 1]", cfg.failRate)
	case cfg.outage < 0:
		return cfg, fmt.Errorf("-outage %s: must not be negative", cfg.outage)
	case cfg.outageAfter < 0:
		return cfg, fmt.Errorf("-outage-after %s: must not be negative", cfg.outageAfter)
	case cfg.latency < 0:
		return cfg, fmt.Errorf("-latency %s: must not be negative", cfg.latency)
	case cfg.progress < 0:
		return cfg, fmt.Errorf("-progress %s: must not be negative", cfg.progress)
	case cfg.checkpointEvery < 0:
		return cfg, fmt.Errorf("-checkpoint-every %s: must not be negative", cfg.checkpointEvery)
	case cfg.db == "":
		return cfg, errors.New("-db: a database file is needed")
	}
	cfg.defaults()
	return cfg, nil
}

// defaults fills in the files that the flags leave to their defaults,
// next to the database.
func (cfg *config) defaults() {
	dir := filepath.Dir(cfg.db)
	if cfg.dlq == "" {
		cfg.dlq = filepath.Join(dir, "dead-letters.jsonl")
	}
	if cfg.input == "" {
		cfg.input = filepath.Join(dir, fmt.Sprintf("orders-%d-seed%d.csv", cfg.rows, cfg.seed))
		cfg.generated = true
	}
	if cfg.checkpoint == "" {
		cfg.checkpoint = filepath.Join(dir, "checkpoint.json")
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// inspector serves the live inspector page (observer/inspect) while the
// job runs: read-only, item contents hidden, on the address of
// -inspect-addr.
type inspector struct {
	in   *inspect.Inspector
	srv  *http.Server
	done chan error
}

// startInspector listens on addr and serves the page at /; an empty addr
// serves nothing and returns nil.
func startInspector(addr string, w io.Writer) (*inspector, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("etl: -inspect-addr: %w", err)
	}
	i := &inspector{in: inspect.New(), done: make(chan error, 1)}
	i.srv = &http.Server{Handler: i.in, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		err := i.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		i.done <- err
	}()
	fmt.Fprintf(w, "inspector on http://%s/\n", ln.Addr())
	return i, nil
}

// observer returns the observer the pipeline reports to.
func (i *inspector) observer() observer.Observer {
	if i == nil {
		return nil
	}
	return i.in
}

// stop ends the page's event streams, each after a last snapshot of the
// counts as the run left them, then shuts the server down, giving those
// snapshots a moment to go out (a stream's last write has a second), and
// waits for it.
func (i *inspector) stop() error {
	if i == nil {
		return nil
	}
	i.in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := i.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = i.srv.Close()
	}
	return errors.Join(err, <-i.done)
}
