package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/graphdoc"
	"github.com/sluicehq/sluice/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// output is what run writes; a test waits on it for lines to appear.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.changed)
	o.changed = make(chan struct{})
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output matches re and returns the submatches.
func (o *output) waitFor(t *testing.T, ctx context.Context, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	for {
		o.mu.Lock()
		m := rx.FindStringSubmatch(o.buf.String())
		ch := o.changed
		o.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no %q in the output:\n%s", re, o.String())
		}
	}
}

// started runs the sample with args in the background and returns its
// output, the address it serves, and a function that waits for run.
func started(t *testing.T, ctx context.Context, args ...string) (*output, string, func() error) {
	t.Helper()
	out := newOutput()
	finished := make(chan struct{})
	var err error
	go func() {
		defer close(finished)
		err = run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), out)
	}()
	// The test's context is done before cleanups run: run must return.
	t.Cleanup(func() { <-finished })
	addr := out.waitFor(t, ctx, `metrics: serving http://(\S+)/metrics`)[1]
	return out, addr, func() error {
		<-finished
		return err
	}
}

// client does not keep connections, so that none is left for goleak.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// scrape gets /metrics over HTTP and parses it.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// value returns the value of the series of name whose labels include
// labels, given as name, value pairs.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "no metric %s", name)
next:
	for _, m := range mf.GetMetric() {
		have := make(map[string]string)
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// script computes what the flaky step does to ids 0 to items-1: the
// retries it makes and the ids it dead-letters.
func script(items int, fail float64, seed uint64) (retries int, dead map[int]bool) {
	dead = make(map[int]bool)
	for id := range items {
		attempt := 1
		for chance(seed, id, attempt) < fail {
			if attempt > maxRetries {
				dead[id] = true
				break
			}
			retries++
			attempt++
		}
	}
	return retries, dead
}

func TestServesTheFiguresOfTheRun(t *testing.T) {
	t.Parallel()
	const items, fail, seed = 500, 0.3, 7
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, addr, wait := started(t, ctx, "-items", fmt.Sprint(items), "-rate", "0", "-fail", fmt.Sprint(fail),
		"-seed", fmt.Sprint(seed), "-hold", "-log-level", "ERROR")
	out.waitFor(t, ctx, `metrics: holding`)
	assert.Contains(t, out.String(), "metrics: run finished: ok")

	retries, dead := script(items, fail, seed)
	require.NotEmpty(t, dead, "the seed must dead-letter some orders")
	filtered := 0
	for id := range items {
		if !dead[id] && id%10 == 0 {
			filtered++
		}
	}
	enriched := items - len(dead)

	mfs := scrape(t, addr)
	pl := []string{"pipeline", "orders"}
	at := func(node string, more ...string) []string { return append(append(pl, "node", node), more...) }
	for _, c := range []struct {
		metric string
		labels []string
		want   int
	}{
		{"sluice_items_out_total", at("read"), items},
		{"sluice_items_in_total", at("enrich"), items},
		{"sluice_items_out_total", at("enrich"), enriched},
		{"sluice_items_failed_total", at("enrich"), len(dead)},
		{"sluice_dead_letters_total", at("enrich"), len(dead)},
		{"sluice_retries_exhausted_total", at("enrich", "kind", "item_retry", "limit", "count"), len(dead)},
		{"sluice_retries_total", at("enrich", "kind", "item_retry"), retries},
		{"sluice_retry_delay_seconds", at("enrich", "kind", "item_retry"), retries},
		{"sluice_items_in_total", at("valid"), enriched},
		{"sluice_items_filtered_total", at("valid"), filtered},
		{"sluice_items_out_total", at("valid"), enriched - filtered},
		{"sluice_items_in_total", at("store"), enriched - filtered},
		{"sluice_items_out_total", at("store"), enriched - filtered},
		{"sluice_drops_total", at("enrich"), 0},
		{"sluice_circuit_state", at("enrich"), 0},
		{"sluice_items_in_flight", at("enrich"), 0},
		{"sluice_items_in_flight", at("store"), 0},
	} {
		assert.Equal(t, float64(c.want), value(t, mfs, c.metric, c.labels...), "%s%v", c.metric, c.labels)
	}
	assert.Contains(t, mfs, "go_goroutines", "the Go runtime's metrics are served too")

	cancel()
	require.NoError(t, wait(), "an interrupted hold is a clean exit")
	_, err := client.Get("http://" + addr + "/metrics")
	assert.Error(t, err, "the server is shut down")
}

func TestAnItemsRunEndsOnItsOwn(t *testing.T) {
	t.Parallel()
	out, _, wait := started(t, t.Context(), "-items", "50", "-rate", "0", "-log-level", "WARN")
	require.NoError(t, wait())
	assert.Contains(t, out.String(), "metrics: run finished: ok")
	assert.Regexp(t, `store\s+sink\s+\d+`, out.String(), "the result table is printed")
}

// TestProgress checks the -progress lines: the output is no terminal, so
// each is a compact line, and the last one, with the run's final counts,
// comes before the run's result.
func TestProgress(t *testing.T) {
	t.Parallel()
	out, _, wait := started(t, t.Context(), "-items", "300", "-rate", "0", "-log-level", "ERROR", "-progress", "1s")
	require.NoError(t, wait())
	final := regexp.MustCompile(`(?m)^[\d.]+s  read 300 \([\d.k]+/s, avg [\d.k]+/s\)  store (\d+) \(.*  done\nmetrics: run finished: ok`).FindStringSubmatch(out.String())
	require.NotNil(t, final, out.String())
	_, dead := script(300, 0.2, 1)
	stored := 0
	for id := range 300 {
		if !dead[id] && id%10 != 0 {
			stored++
		}
	}
	assert.Equal(t, strconv.Itoa(stored), final[1], "what was not dead-lettered nor filtered out")
}

func TestAnEndlessRunServesWhileRunningAndStopsWhenInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, addr, wait := started(t, ctx, "-rate", "0", "-log-level", "WARN")
	// Scrape until the first items show: each scrape is a real request to
	// the running server.
	for value(t, scrape(t, addr), "sluice_items_in_total", "node", "store") == 0 {
	}
	cancel()
	require.NoError(t, wait(), "interrupting an endless run is its normal end")
	assert.Contains(t, out.String(), "metrics: run finished: ok")
}

func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args  []string
		err   string
		usage bool // exits 2, as a bad command line does
	}{
		{[]string{"-fail", "2"}, "metrics: -fail 2: must be in [0, 1]", true},
		{[]string{"-items", "-1"}, "metrics: -items -1: must not be negative", true},
		{[]string{"-rate", "-5"}, "metrics: -rate -5: must not be negative", true},
		{[]string{"-progress", "-1s"}, "metrics: -progress -1s: must not be negative", true},
		{[]string{"extra"}, `metrics: unexpected argument "extra"`, true},
		{[]string{"-log-level", "LOUD"}, `invalid value "LOUD" for flag -log-level`, true},
		{[]string{"-addr", "127.0.0.1:99999"}, "metrics: listen tcp: address 99999: invalid port", false},
	} {
		var out bytes.Buffer
		err := run(t.Context(), c.args, &out)
		require.Error(t, err, "%v", c.args)
		assert.Contains(t, err.Error(), c.err, "%v", c.args)
		assert.Equal(t, c.usage, errors.As(err, new(usageError)), "%v: a usage error", c.args)
	}
}

// docs/graph.md embeds the graph of this sample with its default flags,
// and it is what Graph renders now.
func TestDocGraph(t *testing.T) {
	s, err := parse(nil, io.Discard)
	require.NoError(t, err)
	p, err := build(s, observer.Nop{})
	require.NoError(t, err)
	graphdoc.Embedded(t, filepath.Join("..", "..", "docs", "graph.md"), "samples/metrics", p.Graph().Mermaid())
}
