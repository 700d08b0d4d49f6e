package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// chromiumPath is Debian's Chromium, which CI installs (.ci/run).
const chromiumPath = "/usr/bin/chromium"

// screenshotsEnv names a folder to save the inspector's screenshots in;
// docs/images takes them with SLUICE_SCREENSHOTS=$PWD/docs/images. Without
// it they go to the test's temporary folder.
const screenshotsEnv = "SLUICE_SCREENSHOTS"

// browser starts a headless Chromium with a new empty profile, or skips
// the test (fails it when SLUICE_REQUIRE_SERVICES=1) when none is
// installed. The machine's network is closed: nothing in the flags lets
// Chromium reach out.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := fmt.Sprintf("Chromium not installed at %s (%v); install Debian's chromium package; CI sets %s=1 to make this a failure",
			chromiumPath, err, servicetest.RequireEnv)
		if os.Getenv(servicetest.RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1500, 900))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it lives as long as ctx.
	require.NoError(t, chromedp.Do(ctx))
	return ctx
}

func screenshotDir(t *testing.T) string {
	if d := os.Getenv(screenshotsEnv); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// demoOrder is an order of the demo-like pipeline.
type demoOrder struct {
	ID     int
	Amount int
}

// orderFeed emits n orders, then waits for the run to end or drain: a
// live job as the page sees it.
type orderFeed struct{ n int }

func (f orderFeed) Run(ctx context.Context, out node.Emitter[demoOrder]) error {
	for i := 1; i <= f.n; i++ {
		if err := out.Emit(ctx, demoOrder{ID: i, Amount: i * 7 % 500}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

var (
	errNegative = resilience.MarkPermanent(errors.New("validate: amount out of range"))
	errRate     = resilience.MarkPermanent(errors.New("enrich: no exchange rate for currency XTS"))
)

// demoPipeline is built like the demo ETL job (samples/etl): read, parse,
// enrich through a flaky service on parallel workers with item retries and
// a breaker, validate, load; the failures go to a dead-letter sink. Its
// clock is a fake one that nobody advances: every failure here is
// permanent, so nothing waits.
func demoPipeline(t *testing.T, in *inspect.Inspector, n int) (*pipeline.Pipeline, *deadletter.Memory) {
	mem := deadletter.NewMemory(n)
	b := pipeline.New("etl", pipeline.WithObserver(in), pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithHandOverBatch(1),
		pipeline.WithDeadLetter(in.DeadLetterSink(mem)),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	read := pipeline.Source(b, "read", orderFeed{n: n}, pipeline.SourceKey(func(o demoOrder) string { return "order-" + strconv.Itoa(o.ID) }))
	parsed := pipeline.Map(b, "parse", read, func(_ context.Context, o demoOrder) (demoOrder, error) { return o, nil })
	enriched := pipeline.Map(b, "enrich", parsed, func(_ context.Context, o demoOrder) (demoOrder, error) {
		if o.ID%50 == 0 {
			return o, errRate
		}
		return o, nil
	}, pipeline.Parallel(8), pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.CircuitBreaker = resilience.CircuitBreakerOptions{Enabled: true, ConsecutiveFailures: 20,
			OpenDuration: time.Second, HalfOpenProbes: 1, ProbeSuccesses: 1}
	}))
	valid := pipeline.Map(b, "validate", enriched, func(_ context.Context, o demoOrder) (demoOrder, error) {
		if o.Amount > 480 {
			return o, errNegative
		}
		return o, nil
	})
	pipeline.Sink(b, "load", valid, node.SinkFunc[demoOrder](func(context.Context, demoOrder) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	return p, mem
}

func serve(h http.Handler) *httptest.Server { return httptest.NewServer(h) }

// closeServer ends the page's event stream, which the browser would keep
// open, then the server.
func closeServer(srv *httptest.Server) {
	srv.CloseClientConnections()
	srv.Close()
}

// nodeRow is a node as the page shows it.
type nodeRow struct {
	Name string `json:"name"`
	In   string `json:"in"`
	Out  string `json:"out"`
	Dead string `json:"dead"`
}

const readNodes = `Array.from(document.querySelectorAll("g.node")).map(g => ({name: g.dataset.node, in: g.querySelector(".in").textContent, out: g.querySelector(".out").textContent, dead: g.dataset.dead || ""}))`

func TestInspectorInBrowser(t *testing.T) {
	ctx := browser(t)
	in := inspect.New(inspect.AllowDrain(), inspect.WithInterval(100*time.Millisecond))
	const n = 1000
	p, mem := demoPipeline(t, in, n)
	mux := http.NewServeMux()
	mux.Handle("/inspect/", http.StripPrefix("/inspect", in))
	srv := serve(mux)
	defer closeServer(srv)

	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(runCtx)
		done <- err
	}()

	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/inspect/"), chromedp.WaitVisible("g.node")))
	// Live updates: the stream's snapshots keep coming, and the last item
	// reaches the page once every order is settled.
	_, err := chromedp.Run(tctx, chromedp.Poll[bool](`Number(document.getElementById("ticks").dataset.ticks) >= 3`))
	require.NoError(t, err)
	failing := 0
	for i := 1; i <= n; i++ {
		if i%50 == 0 || i*7%500 > 480 {
			failing++
		}
	}
	want := fmt.Sprint(n - failing)
	// Every order has reached its end once parse took in all of them and
	// load took in the rest: the counts stand still (the source waits).
	// The snapshot two ticks later is read after that.
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelector('g.node[data-node="parse"] .in').textContent === "`+strconv.Itoa(n)+`" && document.querySelector('g.node[data-node="load"] .in').textContent === `+strconv.Quote(want)))
	if err != nil {
		rows, _ := chromedp.Run(ctx, chromedp.Evaluate[[]nodeRow](readNodes))
		t.Fatalf("the page does not show load in %s: %v; it shows %+v; Stats %+v", want, err, rows, p.Stats())
	}
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelectorAll("#dead-table tbody tr").length > 0`))
	require.NoError(t, err)
	ticks, err := chromedp.Run(tctx, chromedp.Evaluate[int](`Number(document.getElementById("ticks").dataset.ticks)`))
	require.NoError(t, err)
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`Number(document.getElementById("ticks").dataset.ticks) >= `+strconv.Itoa(ticks+2)))
	require.NoError(t, err)
	rows, err := chromedp.Run(tctx, chromedp.Evaluate[[]nodeRow](readNodes))
	require.NoError(t, err)
	st := p.Stats()
	require.True(t, st.Running)
	require.Len(t, rows, len(st.Nodes))
	for i, ns := range st.Nodes {
		assert.Equal(t, ns.Node, rows[i].Name)
		assert.Equal(t, fmt.Sprint(ns.In), rows[i].In, ns.Node)
		assert.Equal(t, fmt.Sprint(ns.Out), rows[i].Out, ns.Node)
		assert.Equal(t, fmt.Sprint(ns.DeadLettered), rows[i].Dead, ns.Node)
	}
	enrich, _ := st.Node("enrich")
	assert.Equal(t, int64(n/50), enrich.DeadLettered)
	total, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("dead-total")))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(failing), total)
	assert.Len(t, mem.Envelopes(), failing, "the program's sink got every dead letter")

	dir := screenshotDir(t)
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inspector.png"), shot, 0o644))

	// A dead letter opens to its history; the item itself is not shown.
	require.NoError(t, chromedp.Do(tctx, chromedp.Click(chromedp.CSS("#dead-table tbody tr")), chromedp.WaitVisible("#detail")))
	detail, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("detail")))
	require.NoError(t, err)
	assert.Contains(t, detail, "history:")
	assert.Contains(t, detail, "reason: ")
	assert.NotContains(t, detail, "item: ")
	shot, err = chromedp.Run(tctx, chromedp.Screenshot(chromedp.ID("dead")))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inspector-deadletter.png"), shot, 0o644))

	// Drain from the page: the run ends without error, drained.
	require.NoError(t, chromedp.Do(tctx, chromedp.WaitVisible("#drain"), chromedp.Click(chromedp.ID("drain"))))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-tctx.Done():
		t.Fatal("the run did not end after Drain was pressed")
	}
	st = p.Stats()
	assert.False(t, st.Running)
	assert.True(t, st.Draining)
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`document.getElementById("status").textContent.includes("drained")`))
	require.NoError(t, err, "the page shows the run drained")
	// The run's final counts are exact: every order settled, and the page
	// shows them.
	load, _ := st.Node("load")
	assert.Equal(t, int64(n-failing), load.Out)
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelector('g.node[data-node="load"] .out').textContent === `+strconv.Quote(want)))
	require.NoError(t, err, "the page shows load out %s after the drain", want)
	shot, err = chromedp.Run(tctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inspector-drained.png"), shot, 0o644))
}

func TestInspectorReadOnlyByDefaultInBrowser(t *testing.T) {
	ctx := browser(t)
	in := inspect.New()
	p, _ := demoPipeline(t, in, 10)
	srv := serve(in)
	defer closeServer(srv)
	runCtx, cancelRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(runCtx)
		done <- err
	}()
	defer func() {
		cancelRun()
		<-done
	}()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("g.node")))
	_, err := chromedp.Run(tctx, chromedp.Poll[bool](`Number(document.getElementById("ticks").dataset.ticks) >= 1`))
	require.NoError(t, err)
	hidden, err := chromedp.Run(tctx, chromedp.Evaluate[[]bool](`[document.getElementById("drain").hidden, document.getElementById("cancel").hidden]`))
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, hidden, "no buttons without AllowDrain and AllowCancel")
}

// The page stays usable with 50 nodes and 10,000 dead letters: it draws
// every node, and lists the dead letters 50 to a page.
func TestInspectorLargeInBrowser(t *testing.T) {
	ctx := browser(t)
	in := inspect.New(inspect.WithInterval(200 * time.Millisecond))
	const dead = 10_000
	b := pipeline.New("wide", pipeline.WithObserver(in), pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithHandOverBatch(1),
		pipeline.WithDeadLetter(in.DeadLetterSink(deadletter.NewMemory(dead))),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	s := pipeline.Source(b, "read", orderFeed{n: dead + 500})
	s = pipeline.Map(b, "check", s, func(_ context.Context, o demoOrder) (demoOrder, error) {
		if o.ID <= dead {
			return o, fmt.Errorf("check: rule %c failed", 'a'+o.ID%7)
		}
		return o, nil
	})
	for i := range 47 {
		s = pipeline.Map(b, fmt.Sprintf("step%02d", i+1), s, func(_ context.Context, o demoOrder) (demoOrder, error) { return o, nil })
	}
	pipeline.Sink(b, "load", s, node.SinkFunc[demoOrder](func(context.Context, demoOrder) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	srv := serve(in)
	defer closeServer(srv)
	runCtx, cancelRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(runCtx)
		done <- err
	}()
	defer func() {
		cancelRun()
		<-done
	}()

	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("g.node")))
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`document.getElementById("dead-total").textContent === "10000" && document.getElementById("page-info").textContent.startsWith("page 1 of 200")`))
	require.NoError(t, err)
	count, err := chromedp.Run(tctx, chromedp.Evaluate[[]int](`[document.querySelectorAll("g.node").length, document.querySelectorAll("#dead-table tbody tr").length, document.querySelectorAll("#groups div").length]`))
	require.NoError(t, err)
	assert.Equal(t, []int{50, 50, 7}, count)
	require.NoError(t, chromedp.Do(tctx, chromedp.Click(chromedp.ID("next"))))
	_, err = chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelector("#dead-table tbody tr").dataset.id === "51"`))
	require.NoError(t, err, "the next page starts at the 51st dead letter")
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(screenshotDir(t), "inspector-large.png"), shot, 0o644))
}
