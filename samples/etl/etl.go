package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// pipelineName names the job's pipeline, in its metrics, dead letters and
// checkpoint.
const pipelineName = "orders-etl"

// build returns the job's pipeline, what it loads into and its source.
// cp, when not nil, keeps the source's position every cfg.checkpointEvery.
func build(cfg config, clock clockwork.Clock, dlq deadletter.Sink, obs observer.Observer, cp checkpoint.Store) (*pipeline.Pipeline, *store, *file.Source[file.Record], error) {
	rates := newRateClient(newRateService(clock, cfg.seed, cfg.latency, cfg.failRate, cfg.outageAfter, cfg.outage))
	st := &store{path: cfg.db}

	opts := []pipeline.Option{
		pipeline.WithClock(clock),
		pipeline.WithRand(rand.New(rand.NewPCG(cfg.seed, 7))),
		pipeline.WithObserver(obs),
		pipeline.WithDeadLetter(dlq),
		// Whatever fails for good is dead-lettered, never lost and never
		// stopping the job.
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }),
	}
	if cp != nil {
		// The position up to which every row reached its outcome (loaded
		// or dead-lettered), saved every second, at the end of the input
		// and when the run stops: a run after a crash resumes there.
		opts = append(opts, pipeline.WithCheckpoint(cp, cfg.checkpointEvery))
	}
	b := pipeline.New(pipelineName, opts...)

	// Any number of fields: a row with a field too few is parse's to
	// dead-letter, with the reason the other malformed rows get.
	src := file.CSV(cfg.input, file.CSVOptions{Header: true, FieldsPerRecord: -1})
	rows := pipeline.Source(b, "read", src)
	orders := pipeline.Transform(b, "parse", rows, node.TransformFunc[file.Record, Order](parse))
	priced := pipeline.Transform(b, "enrich", orders, node.TransformFunc[Order, Order](rates.enrich),
		// In the order of the file: the day windows' watermark follows the
		// orders' dates as they come, and a row handed on seconds late,
		// after its retries, would come days behind the rows read since,
		// and be late. Ordered output holds the results behind a row that
		// waits for a retry; the workers go on meanwhile.
		pipeline.Parallel(cfg.workers),
		pipeline.NodeResilience(func(o *resilience.Options) {
			// A flaky dependency: a few quick retries with full jitter...
			o.ItemRetry.MaxRetries = 4
			o.ItemRetry.Backoff = resilience.Exponential(20 * time.Millisecond).WithMaxDelay(500 * time.Millisecond)
			// ...and a breaker that stops calling it while it is down, and
			// holds the input back instead of dead-lettering everything.
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 8
			o.CircuitBreaker.OpenDuration = 500 * time.Millisecond
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
			o.CircuitBreaker.MaxPause = 30 * time.Second
		}))
	valid := pipeline.Transform(b, "validate", priced, node.TransformFunc[Order, Order](validate))
	// A database that refuses a row or a total fails the job: validate
	// lets no such row through, so one is a bug, not bad input, and a
	// database that refuses every row (a full disk) would dead-letter
	// them all. A locked database file is worth a retry.
	strict := pipeline.NodeResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.Fail
		o.NodeRestart.MaxRestarts = 2
	})
	// connector/sql's upsert, in batches of 500 rows (a part batch waits
	// 250 ms for more), one transaction per batch: sluicesql.Upsert, built
	// by hand from the store's Upserter so that the summary can say how
	// many rows the run inserted or changed. Each order is settled, and
	// its position may be saved, only once its batch committed. A row the
	// database refuses is split out of its batch and fails alone, naming
	// the constraint.
	pipeline.ForEachBatch(b, "load", valid, sluicesql.DefaultBatchSize, 250*time.Millisecond, st.Write, strict)
	// The customers' totals per day, by the order's own date: event-time
	// windows of a day, and the late orders beside them (see days.go).
	// An order settles once it is loaded and its day's total is written.
	addDays(b, valid, st, strict)
	p, err := b.Build()
	return p, st, src, err
}

// A runner runs the job's pipeline: pipeline.RunUntilSignal in the
// command, so that the first Ctrl-C drains the job and a second cancels
// it; in tests, one that drains on cue. nil runs it with p.Run.
type runner func(ctx context.Context, p *pipeline.Pipeline) (pipeline.Result, error)

// runETL runs the job once, with run, and returns its summary. A drained
// job stopped reading rows and let every row already read reach its
// outcome; a run that fails or is cancelled still returns the summary of
// what it did, with the error.
func runETL(ctx context.Context, cfg config, clock clockwork.Clock, progress io.Writer, run runner) (summary, error) {
	cfg.defaults()
	if err := os.MkdirAll(filepath.Dir(cfg.db), 0o755); err != nil {
		return summary{}, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.dlq), 0o755); err != nil {
		return summary{}, err
	}
	if cfg.generated {
		wrote, err := writeOrders(cfg.input, cfg.rows, cfg.seed)
		if err != nil {
			return summary{}, err
		}
		if wrote {
			fmt.Fprintf(progress, "etl: wrote %d orders (seed %d) to %s\n", cfg.rows, cfg.seed, cfg.input)
		}
	}
	cp, at, err := openCheckpoint(ctx, cfg)
	if err != nil {
		return summary{}, err
	}
	fmt.Fprintf(progress, "etl: %s\n", at)
	dlq, err := deadletter.OpenFile(cfg.dlq)
	if err != nil {
		return summary{}, errors.Join(err, cp.close())
	}
	// A run that starts over (-fresh) gets a dead-letter file of its own;
	// earlier runs' are rotated to FILE.000001, ... A resumed run appends
	// to the file of the run it goes on from: the file then holds the dead
	// letters of the whole input once, as the file sink writes no second
	// envelope for a row that the resumed run reads again. That holds
	// across rotated files too: a run that starts over writes no envelope
	// for a row an earlier run's file holds already (the summary counts
	// them).
	if at.over {
		if err := dlq.Rotate(); err != nil {
			return summary{}, errors.Join(err, dlq.Close(), cp.close())
		}
	}
	obs := &tracker{reasons: map[reason]int{}}
	m, err := startMetrics(cfg.metricsAddr, progress)
	if err != nil {
		return summary{}, errors.Join(err, dlq.Close(), cp.close())
	}
	ins, err := startInspector(cfg.inspectAddr, progress)
	if err != nil {
		return summary{}, errors.Join(err, m.stop(), dlq.Close(), cp.close())
	}
	defer ins.stop()
	p, st, src, err := build(cfg, clock, dlq, observer.Multi(obs, m.observer(), ins.observer()), cp.store())
	if err != nil {
		return summary{}, errors.Join(err, m.stop(), dlq.Close(), cp.close())
	}
	if err := st.Open(ctx); err != nil {
		return summary{}, errors.Join(err, m.stop(), dlq.Close(), cp.close())
	}

	start := clock.Now()
	stopProgress := showProgress(p, clock, cfg, progress)
	if run == nil {
		run = func(ctx context.Context, p *pipeline.Pipeline) (pipeline.Result, error) { return p.Run(ctx) }
	}
	res, runErr := run(ctx, p)
	stopProgress()
	drained := p.Stats().Draining
	if errors.Is(runErr, pipeline.ErrDrained) {
		runErr = nil // a signal drained the job, and every row read reached its outcome
	}
	err = errors.Join(runErr, dlq.Close(), cp.close(), m.stop(), writeGraph(graphPath(cfg), p))
	letters := dlq.Stats()
	// The loader's connection closes once the run ended, before the
	// summary reads the tables in a connection of its own.
	err = errors.Join(err, st.Close(ctx))
	// With a context of its own: after a cancelled run, what the tables
	// hold is still worth saying.
	wctx := context.WithoutCancel(ctx)
	totals, terr := readTotals(wctx, cfg.db)
	if terr != nil {
		err = errors.Join(err, fmt.Errorf("etl: customer totals: %w", terr))
	}
	inTable, cerr := count(wctx, cfg.db)
	if cerr != nil {
		err = errors.Join(err, fmt.Errorf("etl: count rows: %w", cerr))
	}
	return summary{
		cfg: cfg, res: res, at: at, elapsed: clock.Since(start),
		badRows: src.BadRows(), letters: letters,
		changed: st.changed(), inTable: inTable, totals: totals,
		reasons: obs.snapshot(), outages: obs.breakerOutages(),
		drained: drained, stopped: runErr,
	}, err
}

// graphPath is where the job writes the picture of its pipeline: beside
// the database, as sluice-demo/pipeline.mmd by default.
func graphPath(cfg config) string { return filepath.Join(filepath.Dir(cfg.db), "pipeline.mmd") }

// writeGraph writes p's graph, with the counts of the run that ended, as
// a Mermaid flowchart to path: paste it into a ```mermaid block of a
// markdown page, or open it in a Mermaid viewer, to see where the rows
// went.
func writeGraph(path string, p *pipeline.Pipeline) error {
	if err := os.WriteFile(path, []byte(p.Graph().WithStats(p.Stats()).Mermaid()), 0o644); err != nil {
		return fmt.Errorf("etl: write the pipeline's graph: %w", err)
	}
	return nil
}

// A reason groups dead letters: the node where they failed and why.
type reason struct {
	node, why string
}

// tracker is an observer that groups dead letters by reason and follows
// the breaker through each outage.
type tracker struct {
	observer.Nop
	mu      sync.Mutex
	reasons map[reason]int
	// moves are the enrich breaker's transitions as they arrived: the
	// breaker reports them after it unlocks, so parallel workers' can
	// arrive out of order, and breakerOutages orders them by Generation.
	moves []observer.CircuitEvent
}

// An outage is the breaker's way from a trip to the close that ends it:
// it opens once on the trip and once more on each failed probe, so one
// outage of the service can open it many times.
type outage struct {
	opened       int  // times it opened: the trip, then each failed probe
	failedProbes int  // probes that failed and opened it again
	closed       bool // a probe succeeded and closed it
}

func (t *tracker) OnDeadLetter(e observer.DeadLetterEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reasons[reason{e.OriginNode, why(e.Err)}]++
}

func (t *tracker) OnCircuitStateChanged(e observer.CircuitEvent) {
	if e.Node != "enrich" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.moves = append(t.moves, e)
}

func (t *tracker) snapshot() []reasonCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]reasonCount, 0, len(t.reasons))
	for r, n := range t.reasons {
		out = append(out, reasonCount{r, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].why < out[j].why
	})
	return out
}

// breakerOutages folds the enrich breaker's transitions, in the order the
// breaker made them, into outages.
func (t *tracker) breakerOutages() []outage {
	t.mu.Lock()
	moves := slices.Clone(t.moves)
	t.mu.Unlock()
	slices.SortFunc(moves, func(a, b observer.CircuitEvent) int { return cmp.Compare(a.Generation, b.Generation) })
	var outages []outage
	for _, e := range moves {
		switch {
		case e.To == resilience.CircuitOpen && (e.From == resilience.CircuitClosed || len(outages) == 0):
			outages = append(outages, outage{opened: 1})
		case e.To == resilience.CircuitOpen:
			last := &outages[len(outages)-1]
			last.opened++
			last.failedProbes++
		case e.To == resilience.CircuitClosed && len(outages) > 0:
			outages[len(outages)-1].closed = true
		}
	}
	return outages
}

type reasonCount struct {
	reason
	n int
}

// why names the kind of a dead letter's error.
func why(err error) string {
	var row *rowError
	var rule *ruleError
	var exhausted *resilience.RetryExhaustedError
	switch {
	case errors.As(err, &row):
		return "malformed row: " + row.field
	case errors.As(err, &rule):
		return "rule: " + rule.rule
	case errors.Is(err, errUnknownCurrency):
		return "unknown currency"
	case errors.As(err, &exhausted):
		return "exchange rates unavailable, retries exhausted"
	case errors.Is(err, resilience.ErrCircuitOpen):
		return "exchange rates unavailable, breaker open"
	default:
		return err.Error()
	}
}
