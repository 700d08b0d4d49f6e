package pipeline_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// An Aggregate and a Join show the failure actions their refused and
// late items meet: "dead letter" where OnItemFailure or a rule says so,
// and where late items are dead-lettered (an event-time node without
// Late or JoinLate); nothing where neither happens. A Join's tagging
// nodes show none.
func TestGraphLayersOfAggregatesAndJoins(t *testing.T) {
	t.Parallel()
	deadLetter := pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter })
	skip := pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip })
	b := pipeline.New("stateful", pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource[ev]())
	var late pipeline.Stream[ev]
	for _, a := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"plain", nil},
		{"dead-lettering", []pipeline.NodeOption{deadLetter}},
		{"skipping", []pipeline.NodeOption{skip}},
		{"event-time", []pipeline.NodeOption{pipeline.EventTime(evAt, time.Minute, 0)}},
		{"event-time-late", []pipeline.NodeOption{pipeline.EventTime(evAt, time.Minute, 0), pipeline.Late(&late)}},
	} {
		out := pipeline.Aggregate(b, "agg-"+a.name, src, evKey, pipeline.TimeWindow(time.Minute), evZero, evSum, a.opts...)
		pipeline.Sink(b, "store-agg-"+a.name, out, &pipelinetest.Collector[pipeline.Window[int, int]]{})
	}
	pipeline.Sink(b, "store-late", late, &pipelinetest.Collector[ev]{})
	pair := func(l, r ev) int { return l.V + r.V }
	for _, j := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"plain", nil},
		{"dead-lettering", []pipeline.NodeOption{deadLetter}},
		{"event-time", []pipeline.NodeOption{pipeline.JoinEventTime(evAt, evAt, time.Minute, 0)}},
	} {
		out := pipeline.Join(b, "join-"+j.name, src, src, evKey, evKey, time.Minute, pair, j.opts...)
		pipeline.Sink(b, "store-join-"+j.name, out, &pipelinetest.Collector[int]{})
	}
	g := build(t, b).Graph()
	layers := map[string][]string{}
	for _, n := range g.Nodes {
		layers[n.Name] = n.Layers
	}
	for name, want := range map[string][]string{
		"agg-plain":           nil,
		"agg-dead-lettering":  {"dead letter"},
		"agg-skipping":        {"skip"},
		"agg-event-time":      {"dead letter"},
		"agg-event-time-late": nil,
		"join-plain":          nil,
		"join-dead-lettering": {"dead letter"},
		"join-event-time":     {"dead letter"},
	} {
		got, ok := layers[name]
		require.True(t, ok, "no node %s in %v", name, layers)
		if len(want) == 0 {
			assert.Empty(t, got, name)
		} else {
			assert.Equal(t, want, got, name)
		}
	}
	for _, name := range []string{"join-dead-lettering/left", "join-dead-lettering/right", "join-event-time/left"} {
		got, ok := layers[name]
		require.True(t, ok, "no node %s in %v", name, layers)
		assert.Empty(t, got, "a tagging node of a Join: %s", name)
	}
}
