package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// buildProblems returns Build's problems as "node: problem".
func buildProblems(t *testing.T, b *pipeline.Builder) []string {
	t.Helper()
	_, err := b.Build()
	if !errors.Is(err, pipeline.ErrInvalid) {
		t.Fatalf("Build: %v, want ErrInvalid", err)
	}
	var out []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var be *pipeline.BuildError
		if !errors.As(e, &be) {
			t.Fatalf("%v is no *BuildError", e)
		}
		out = append(out, be.Node+": "+be.Err.Error())
	}
	slices.Sort(out)
	return out
}

// Which kinds take Parallel comes from one table: a route runs in
// parallel, a join, an aggregate and a batch do not, and the message
// lists the kinds that do.
func TestParallelOnlyWhereTheKindTakesIt(t *testing.T) {
	t.Parallel()
	b := pipeline.New("par")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2))
	br := pipeline.Route(b, "route", src, 2, func(v int) int { return v % 2 }, pipeline.Parallel(2))
	j := pipeline.Join(b, "join", br[0], br[1], func(v int) int { return v }, func(v int) int { return v }, time.Second,
		func(l, r int) int { return l + r }, pipeline.Parallel(2))
	agg := pipeline.Aggregate(b, "agg", j, func(v int) int { return v }, pipeline.CountWindow(2),
		func() int { return 0 }, func(a, v int) int { return a + v }, pipeline.Parallel(3))
	pipeline.Sink(b, "sink", agg, &pipelinetest.Collector[pipeline.Window[int, int]]{}, pipeline.Parallel(2))
	const refused = "Parallel: only transforms, sinks, filters, flat maps and routes run in parallel"
	got := buildProblems(t, b)
	want := []string{"agg: " + refused, "join: " + refused}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("problems %q lack %q", got, w)
		}
	}
	for _, g := range got {
		if strings.HasPrefix(g, "route:") || strings.HasPrefix(g, "sink: Parallel") {
			t.Errorf("unexpected problem %q", g)
		}
	}
}

// A Route with Parallel builds and runs.
func TestRouteTakesParallel(t *testing.T) {
	t.Parallel()
	b := pipeline.New("route")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3, 4))
	br := pipeline.Route(b, "route", src, 2, func(v int) int { return v % 2 }, pipeline.Parallel(2))
	var even, odd pipelinetest.Collector[int]
	pipeline.Sink(b, "even", br[0], &even)
	pipeline.Sink(b, "odd", br[1], &odd)
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e, o := even.Items(), odd.Items(); !slices.Equal(e, []int{2, 4}) || !slices.Equal(o, []int{1, 3}) {
		t.Errorf("even %v, odd %v", e, o)
	}
}
