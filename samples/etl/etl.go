package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// build returns the job's pipeline and what it loads into.
func build(cfg config, clock clockwork.Clock, dlq deadletter.Sink, obs observer.Observer) (*pipeline.Pipeline, *store, *totalsStore, error) {
	rates := newRateService(clock, cfg.seed, cfg.latency, cfg.failRate, cfg.outageAfter, cfg.outage)
	st := &store{path: cfg.db}
	tot := &totalsStore{store: store{path: cfg.db}}

	b := pipeline.New("orders-etl",
		pipeline.WithClock(clock),
		pipeline.WithRand(rand.New(rand.NewPCG(cfg.seed, 7))),
		pipeline.WithObserver(obs),
		pipeline.WithDeadLetter(dlq),
		// Whatever fails for good is dead-lettered, never lost and never
		// stopping the job.
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))

	lines := pipeline.Source(b, "read", generate(cfg.rows, cfg.seed))
	orders := pipeline.Transform(b, "parse", lines, node.TransformFunc[string, Order](parse))
	priced := pipeline.Transform(b, "enrich", orders, node.TransformFunc[Order, Order](rates.enrich),
		// Order does not matter to a database, and ordered output would hold
		// every result back behind each item that waits for a retry.
		pipeline.Parallel(cfg.workers), pipeline.Unordered(),
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
	batches := pipeline.Batch(b, "batch", valid, 500, 250*time.Millisecond)
	pipeline.Sink[[]Order](b, "load", batches, st, pipeline.NodeResilience(func(o *resilience.Options) {
		// A locked database file is worth a retry; a batch that cannot load
		// fails the job rather than dead-lettering 500 orders at once.
		o.OnItemFailure = resilience.Fail
		o.NodeRestart.MaxRestarts = 2
	}))
	// The valid orders also go to a window per customer that spans the
	// whole run: each is handed on, marked partial, when the input ends,
	// and the customers' totals are loaded in batches.
	totals := pipeline.Aggregate(b, "totals", valid, func(o Order) string { return o.Customer },
		pipeline.CountWindow(math.MaxInt), func() total { return total{} },
		func(t total, o Order) total { return total{t.Orders + 1, t.EURCents + o.EURCents} })
	pipeline.Sink(b, "load-totals", pipeline.Batch(b, "batch-totals", totals, 500, 250*time.Millisecond), tot,
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Fail
			o.NodeRestart.MaxRestarts = 2
		}))
	p, err := b.Build()
	return p, st, tot, err
}

// runETL runs the job once and returns its summary. Once drain is closed
// (nil: never), the job stops reading rows and lets every row already read
// reach its outcome; a run that fails or is cancelled still returns the
// summary of what it did, with the error.
func runETL(ctx context.Context, cfg config, clock clockwork.Clock, progress io.Writer, drain <-chan struct{}) (summary, error) {
	if err := os.MkdirAll(filepath.Dir(cfg.db), 0o755); err != nil {
		return summary{}, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.dlq), 0o755); err != nil {
		return summary{}, err
	}
	dlq, err := deadletter.OpenFile(cfg.dlq)
	if err != nil {
		return summary{}, err
	}
	// Each run's dead letters get a file of their own, so that the file
	// and the summary agree; earlier runs' are rotated to FILE.000001, ...
	if err := dlq.Rotate(); err != nil {
		return summary{}, errors.Join(err, dlq.Close())
	}
	obs := &tracker{reasons: map[reason]int{}}
	m, err := startMetrics(cfg.metricsAddr, progress)
	if err != nil {
		return summary{}, errors.Join(err, dlq.Close())
	}
	p, st, tot, err := build(cfg, clock, dlq, observer.Multi(obs, m.observer()))
	if err != nil {
		return summary{}, errors.Join(err, m.stop(), dlq.Close())
	}

	start := clock.Now()
	stopProgress := showProgress(p, clock, cfg, progress)
	var drained atomic.Bool
	stopDrain := watchDrain(p, drain, &drained)
	res, runErr := p.Run(ctx)
	stopDrain()
	stopProgress()
	err = errors.Join(runErr, dlq.Close(), m.stop(), writeGraph(graphPath(cfg), p))
	// Count with a context of its own: after a cancelled run, what the
	// table holds is still worth saying.
	inTable, cerr := count(context.WithoutCancel(ctx), cfg.db)
	if cerr != nil {
		err = errors.Join(err, fmt.Errorf("etl: count rows: %w", cerr))
	}
	return summary{
		cfg: cfg, res: res, elapsed: clock.Since(start),
		changed: st.changed.Load(), inTable: inTable, totals: tot,
		reasons: obs.snapshot(), outages: obs.breakerOutages(),
		drained: drained.Load(), stopped: runErr,
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

// watchDrain drains p once drain is closed, and sets drained. A drain
// asked for before the run started waits for it. It returns a function
// that stops watching.
func watchDrain(p *pipeline.Pipeline, drain <-chan struct{}, drained *atomic.Bool) (stop func()) {
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
		drained.Store(true)
	}()
	return func() {
		close(done)
		<-ended
	}
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
