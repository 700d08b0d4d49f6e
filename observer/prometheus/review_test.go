package prometheus_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// docs/observability.md's table names every metric the package exports,
// with the type a registry reports. sluice_late_items_total was missing
// (a review's finding).
func TestDocsTableNamesEveryMetric(t *testing.T) {
	f, err := os.ReadFile("../../docs/observability.md")
	require.NoError(t, err)
	row := regexp.MustCompile("^\\| `(sluice_[a-z_]+)` \\| ([a-z]+) \\| ([a-z, ]+) \\|")
	documented := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			documented[m[1]] = m[2]
		}
	}
	types := map[string]string{
		prometheus.ItemsIn: "counter", prometheus.ItemsOut: "counter", prometheus.ItemsFailed: "counter",
		prometheus.ItemsFiltered: "counter", prometheus.DeadLetters: "counter", prometheus.Drops: "counter",
		prometheus.Retries: "counter", prometheus.RetriesExhausted: "counter", prometheus.RetryDelay: "histogram",
		prometheus.CircuitState: "gauge", prometheus.ItemsInFlight: "gauge", prometheus.Fallbacks: "counter",
		prometheus.BrokerRetries: "counter", prometheus.HandedOff: "counter", prometheus.LateItems: "counter",
	}
	for name, typ := range types {
		assert.Equal(t, typ, documented[name], "%s in docs/observability.md's table", name)
	}
	// And every name the Collector describes is one of those.
	descs := make(chan *promclient.Desc, 64)
	prometheus.New().Describe(descs)
	close(descs)
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		m := name.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		assert.Contains(t, types, m[1], "a metric the test does not know")
	}
}

// After a run ends, the breaker gauge says half-open (2) once the open
// period passed, as the next call would find it: it said open (1) for
// good, since the state moved only when a permit was asked for, and
// nothing asks between runs; the documented alert on a gauge at 1 fired
// for a pipeline that had stopped (a review's finding).
func TestCircuitGaugeAfterTheRunEnded(t *testing.T) {
	clock := clockwork.NewFakeClock()
	c := prometheus.New()
	b := pipeline.New("cb", pipeline.WithClock(clock), pipeline.WithObserver(c),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.NodeRetry.MaxRetries = 0
		}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...))
	tr := pipeline.Transform[int, int](b, "call", src, pipelinetest.FailAlways(errFlaky, 0, 1, 2, 3, 4),
		pipeline.NodeResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker = resilience.DefaultCircuitBreaker()
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 2
			o.CircuitBreaker.OpenDuration = time.Second
		}))
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	_, err = p.Run(t.Context())
	require.Error(t, err, "the open breaker fails the node")
	v, ok := gauge(t, reg, prometheus.CircuitState, "call")
	require.True(t, ok)
	assert.Equal(t, 1.0, v, "open, within its open period")
	clock.Advance(time.Second)
	v, _ = gauge(t, reg, prometheus.CircuitState, "call")
	assert.Equal(t, 2.0, v, "past its open period, the next call would be a probe")
}

// One Collector per registry: a second one describes the same metrics,
// and the registry refuses it, as docs/observability.md says.
func TestOneCollectorPerRegistry(t *testing.T) {
	reg := promclient.NewRegistry()
	require.NoError(t, reg.Register(prometheus.New()))
	err := reg.Register(prometheus.New())
	var already promclient.AlreadyRegisteredError
	assert.True(t, errors.As(err, &already), "%v", err)
}

// A late retry event of a pipeline that ForgetStats let go of does not
// bring its series back (nothing would remove them again); once the
// pipeline is observed again, its events count (a review's finding).
func TestForgottenPipelineLateEvents(t *testing.T) {
	c := prometheus.New()
	r := &namedReader{name: "gone"}
	require.NoError(t, c.UseStats(r))
	ev := observer.Event{Pipeline: "gone", Node: "t"}
	c.ForgetStats(r)
	c.OnRetry(observer.RetryEvent{Event: ev, Kind: resilience.ItemRetry, Delay: time.Millisecond})
	c.OnRetryExhausted(observer.RetryExhaustedEvent{Event: ev, Kind: resilience.ItemRetry, Limit: resilience.LimitCount})
	assert.Equal(t, 0, testutil.CollectAndCount(c), "a forgotten pipeline exports nothing")

	// An event of a pipeline never given to UseStats is recorded, as before.
	other := observer.Event{Pipeline: "events-only", Node: "t"}
	c.OnRetry(observer.RetryEvent{Event: other, Kind: resilience.ItemRetry, Delay: time.Millisecond})
	assert.Equal(t, 1, testutil.CollectAndCount(c, prometheus.RetryDelay))

	require.NoError(t, c.UseStats(r))
	c.OnRetryExhausted(observer.RetryExhaustedEvent{Event: ev, Kind: resilience.ItemRetry, Limit: resilience.LimitCount})
	out, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, prometheus.RetriesExhausted)
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(out), `pipeline="gone"`), "%s", out)
}

// namedReader is a StatsReader of one pipeline with no nodes.
type namedReader struct{ name string }

func (r *namedReader) Stats() observer.Stats { return observer.Stats{Pipeline: r.name} }
