package prometheus_test

import (
	"context"
	"sync/atomic"
	"testing"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// gauge returns the value of the series of metric name for node, and
// whether there is one.
func gauge(t *testing.T, g promclient.Gatherer, name, nodeName string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" && l.GetValue() == nodeName {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// A gate fails item 50 in its first run, and holds item 10 in its second
// until released.
type gate struct {
	run              atomic.Int32
	reached, release chan struct{}
}

func (g *gate) Process(ctx context.Context, x int) (int, error) {
	switch {
	case g.run.Load() == 1 && x == 50:
		return 0, errBad
	case g.run.Load() == 2 && x == 10:
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return x, nil
}

func TestItemsInFlightCountsTheCurrentRunOnly(t *testing.T) {
	t.Parallel()
	g := &gate{reached: make(chan struct{}), release: make(chan struct{})}
	hold := make(chan struct{})
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if g.run.Load() == 2 {
			select {
			case <-hold:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for _, v := range ints(64) {
			if err := out.Emit(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	c := prometheus.New()
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("inflight", pipeline.WithObserver(observer.Multi(c, rec)))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", src), g)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	reg := promclient.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))

	// Run 1 fails on item 50, leaving items the node took in and never
	// finished in its counters, which add up over runs.
	g.run.Store(1)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, errBad)
	s, _ := p.Stats().Node("call")
	t.Logf("after the failed run, call holds %d items in its counters", s.In-s.Out-s.Failed)
	v, ok := gauge(t, reg, prometheus.ItemsInFlight, "call")
	require.True(t, ok)
	assert.Zero(t, v, "nothing is in flight while the pipeline is not running")
	_, ok = gauge(t, reg, prometheus.ItemsInFlight, "src")
	assert.False(t, ok, "a source has no items in flight")

	// Run 2: every node has started, the source waits: what the failed run
	// left is not counted.
	g.run.Store(2)
	run := pipelinetest.Start(t.Context(), p)
	_, err = pipelinetest.WaitFor[observer.NodeEvent](t.Context(), rec, 6+3)
	require.NoError(t, err)
	for _, n := range []string{"call", "sink"} {
		v, _ := gauge(t, reg, prometheus.ItemsInFlight, n)
		assert.Zero(t, v, "%s: in flight before anything was emitted in this run", n)
	}

	// The node holds item 10: the items it took in are in flight, within
	// the tallies in which stages publish their counts.
	close(hold)
	<-g.reached
	v, _ = gauge(t, reg, prometheus.ItemsInFlight, "call")
	assert.GreaterOrEqual(t, v, 0.0)
	assert.LessOrEqual(t, v, 64.0)
	close(g.release)
	_, err = run.Wait()
	require.NoError(t, err)
	v, _ = gauge(t, reg, prometheus.ItemsInFlight, "call")
	assert.Zero(t, v)
}

// Build hands the Collector the pipeline's counters, also through Multi;
// a second pipeline of the same name fails its Build, naming the clash.
func TestBuildHandsOverStats(t *testing.T) {
	t.Parallel()
	c := prometheus.New()
	build := func() (*pipeline.Pipeline, error) {
		b := pipeline.New("twice", pipeline.WithObserver(observer.Multi(observer.Nop{}, c)))
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
		return b.Build()
	}
	p, err := build()
	require.NoError(t, err)
	assert.NoError(t, c.UseStats(p), "observing the same pipeline again does nothing")
	_, err = build()
	assert.EqualError(t, err, `pipeline "twice": observer: prometheus: a pipeline named "twice" is already observed`)
	assert.EqualError(t, c.UseStats(nil), "prometheus: UseStats: nil reader")

	_, err = p.Run(t.Context())
	require.NoError(t, err)
	reg := promclient.NewRegistry()
	reg.MustRegister(c)
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, prometheus.ItemsOut)
	require.NoError(t, err)
	assert.Contains(t, string(text), `sluice_items_out_total{node="sink",pipeline="twice"} 3`, "the counters were read without an Observe step")
}
