// Command metrics runs a pipeline with a flaky step and serves its metrics
// for Prometheus on /metrics, with its events logged by slog.
//
// The pipeline reads order ids, enriches each with a call that fails
// transiently (-fail is the chance of each call failing), retries the
// failures, dead-letters what still fails, filters out every tenth order and
// stores the rest. Which calls fail depends only on -seed, so two runs with
// the same flags count the same.
//
//	go run ./samples/metrics                          # 200 orders/s until interrupted
//	go run ./samples/metrics -items 1000              # 1000 orders, then exit
//	go run ./samples/metrics -addr 127.0.0.1:0 -items 1000 -hold
//	go run ./samples/metrics -progress 1s -log-level ERROR  # progress, not the event log
//
// With -hold the metrics stay served after the run until the program is
// interrupted. Scrape with curl http://127.0.0.1:9464/metrics, or point a
// Prometheus at it; docs/observability.md has queries to try.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		if errors.As(err, new(usageError)) {
			os.Exit(2) // as flag.ExitOnError does, and the other samples
		}
		os.Exit(1)
	}
}

// A usageError is a command line the sample cannot run: a flag it does
// not know, a value out of range, a stray argument.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// maxRetries is how often the enrich step retries a failed call.
const maxRetries = 3

type settings struct {
	addr     string
	items    int
	rate     float64
	fail     float64
	seed     uint64
	hold     bool
	logLevel slog.Level
	progress time.Duration
	// inspectAddr serves the live inspector page (read-only); "" serves
	// none.
	inspectAddr string
}

func parse(args []string, out io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&s.addr, "addr", "127.0.0.1:9464", "address to serve /metrics on; port 0 picks a free port")
	fs.IntVar(&s.items, "items", 0, "orders to process before exiting; 0 runs until interrupted")
	fs.Float64Var(&s.rate, "rate", 200, "orders per second; 0 is as fast as possible")
	fs.Float64Var(&s.fail, "fail", 0.2, "chance that each enrich call fails, in [0, 1]")
	fs.Uint64Var(&s.seed, "seed", 1, "seed of the failures and of the backoff jitter")
	fs.BoolVar(&s.hold, "hold", false, "keep serving /metrics after an -items run ends, until interrupted")
	fs.DurationVar(&s.progress, "progress", 0, "show each node's progress this often: redrawn in place on a terminal (where -log-level ERROR keeps the log from writing over it), a line each time otherwise; 0 shows none")
	fs.StringVar(&s.inspectAddr, "inspect-addr", "", "serve the live inspector page (read-only) on this address, such as 127.0.0.1:9465; port 0 picks a free port")
	fs.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "lowest level of the event log: DEBUG, INFO, WARN or ERROR")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	switch {
	case fs.NArg() > 0:
		return s, fmt.Errorf("metrics: unexpected argument %q", fs.Arg(0))
	case s.items < 0:
		return s, fmt.Errorf("metrics: -items %d: must not be negative", s.items)
	case s.progress < 0:
		return s, fmt.Errorf("metrics: -progress %s: must not be negative", s.progress)
	case s.rate < 0:
		return s, fmt.Errorf("metrics: -rate %g: must not be negative", s.rate)
	case !(s.fail >= 0 && s.fail <= 1):
		return s, fmt.Errorf("metrics: -fail %g: must be in [0, 1]", s.fail)
	}
	return s, nil
}

// run runs the sample with args until the run ends (and, with -hold, until
// ctx is done) or ctx is done, writing its log to stdout. An interrupted
// endless run is a success.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	s, err := parse(args, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	log := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: s.logLevel}))
	collector := prometheus.New()
	obs := []observer.Observer{collector, slogobserver.New(log)}
	stopProgress := func() {}
	if s.progress > 0 {
		// An observer too: it draws while a run runs, and its final
		// frame when the run ends, from its own goroutine; Stop waits
		// for that frame, so the result is printed after it.
		rep := progress.New(stdout, progress.WithInterval(s.progress))
		defer rep.Stop()
		stopProgress = rep.Stop
		obs = append(obs, rep)
	}
	var ins *inspect.Inspector
	if s.inspectAddr != "" {
		ins = inspect.New()
		obs = append(obs, ins)
	}
	p, err := build(s, observer.Multi(obs...))
	if err != nil {
		return err
	}
	reg := promclient.NewRegistry()
	reg.MustRegister(collector, collectors.NewGoCollector())

	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			cancel(fmt.Errorf("metrics: serving: %w", err))
		}
	})
	fmt.Fprintf(stdout, "metrics: serving http://%s/metrics\n", ln.Addr())
	var isrv *http.Server
	if ins != nil {
		iln, err := net.Listen("tcp", s.inspectAddr)
		if err != nil {
			cancel(nil)
			return errors.Join(fmt.Errorf("metrics: -inspect-addr: %w", err), srv.Close(), waitGroup(&wg))
		}
		isrv = &http.Server{Handler: ins, ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := isrv.Serve(iln); !errors.Is(err, http.ErrServerClosed) {
				cancel(fmt.Errorf("metrics: serving the inspector: %w", err))
			}
		})
		fmt.Fprintf(stdout, "metrics: inspector on http://%s/\n", iln.Addr())
	}

	// The first Ctrl-C (or SIGTERM) drains the run: the orders read are
	// enriched and stored; a second one cancels it at once.
	res, err := pipeline.RunUntilSignal(runCtx, p)
	stopProgress()
	if errors.Is(err, pipeline.ErrDrained) || ctx.Err() != nil {
		err = nil // interrupted: the normal end of an endless run
	}
	fmt.Fprintf(stdout, "metrics: run finished: %s\n%s", errText(err), res)
	if err == nil && s.hold && runCtx.Err() == nil {
		fmt.Fprintln(stdout, "metrics: holding; interrupt to exit")
		// The run is over: the signal only ends the serving.
		hold, stop := signal.NotifyContext(runCtx, os.Interrupt, syscall.SIGTERM)
		<-hold.Done()
		stop()
	}
	shutdown, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	serr := srv.Shutdown(shutdown)
	if isrv != nil {
		// Close, not Shutdown: the pages' event streams never end.
		serr = errors.Join(serr, isrv.Close())
	}
	wg.Wait()
	if cause := context.Cause(runCtx); err == nil && ctx.Err() == nil && cause != nil {
		err = cause // serving failed
	}
	if serr != nil {
		err = errors.Join(err, fmt.Errorf("metrics: shutting down: %w", serr))
	}
	return err
}

// waitGroup waits for wg; it returns nil, to join with errors.
func waitGroup(wg *sync.WaitGroup) error {
	wg.Wait()
	return nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// build builds the pipeline: read → enrich (flaky, 4 workers) → valid →
// store, with failed orders dead-lettered.
func build(s settings, obs observer.Observer) (*pipeline.Pipeline, error) {
	clock := clockwork.NewRealClock()
	b := pipeline.New("orders",
		pipeline.WithObserver(obs),
		pipeline.WithClock(clock),
		pipeline.WithRand(rand.New(rand.NewPCG(s.seed, 0))),
		// A real pipeline keeps its dead letters (deadletter.OpenFile);
		// this one only counts them, in its metrics.
		pipeline.WithDeadLetter(deadletter.Func(func(context.Context, deadletter.Envelope) error { return nil })),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = maxRetries
			o.ItemRetry.Backoff = resilience.Exponential(2 * time.Millisecond).WithMaxDelay(50 * time.Millisecond)
			o.OnItemFailure = resilience.DeadLetter
		}))
	orders := pipeline.Source(b, "read", &reader{items: s.items, rate: s.rate, clock: clock})
	enriched := pipeline.Transform[int, int](b, "enrich", orders, newFlaky(s.fail, s.seed), pipeline.Parallel(4))
	valid := pipeline.Filter(b, "valid", enriched, func(id int) bool { return id%10 != 0 })
	pipeline.Sink(b, "store", valid, node.SinkFunc[int](func(context.Context, int) error { return nil }))
	return b.Build()
}

// A reader emits order ids 0, 1, 2, … at rate per second (as fast as it
// can when rate is 0), items of them or, when items is 0, until cancelled.
type reader struct {
	items int
	rate  float64
	clock clockwork.Clock
}

func (r *reader) Run(ctx context.Context, out node.Emitter[int]) error {
	var tick <-chan time.Time
	if r.rate > 0 {
		t := r.clock.NewTicker(time.Duration(float64(time.Second) / r.rate))
		defer t.Stop()
		tick = t.Chan()
	}
	for id := 0; r.items == 0 || id < r.items; id++ {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if err := out.Emit(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// flaky passes ids through but fails each call with chance fail. Whether
// a call fails depends only on the seed, the id and the attempt, so the
// same flags fail the same calls whatever the workers' schedule.
type flaky struct {
	fail  float64
	seed  uint64
	mu    sync.Mutex
	calls map[int]int // calls made on ids not yet finished
}

var errUnavailable = resilience.MarkTransient(errors.New("enrich: service unavailable"))

func newFlaky(fail float64, seed uint64) *flaky {
	return &flaky{fail: fail, seed: seed, calls: make(map[int]int)}
}

func (f *flaky) Process(_ context.Context, id int) (int, error) {
	f.mu.Lock()
	attempt := f.calls[id] + 1
	failed := chance(f.seed, id, attempt) < f.fail
	if failed && attempt <= maxRetries {
		f.calls[id] = attempt
	} else {
		delete(f.calls, id) // the last call of this id
	}
	f.mu.Unlock()
	if failed {
		return 0, errUnavailable
	}
	return id, nil
}

// chance returns a number in [0, 1) that depends only on its arguments.
func chance(seed uint64, id, attempt int) float64 {
	x := seed ^ uint64(id)*0x9e3779b97f4a7c15 ^ uint64(attempt)*0xbf58476d1ce4e5b9
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
