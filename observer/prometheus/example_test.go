package prometheus_test

import (
	"context"
	"fmt"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// The Collector is the pipeline's observer and a registry's collector;
// Observe tells it which pipeline's counters to read at scrape time.
func Example() {
	c := prometheus.New()
	b := pipeline.New("greetings", pipeline.WithObserver(c))
	names := pipeline.Source(b, "names", pipelinetest.NewSliceSource("ada", "grace", "edsger"))
	hello := pipeline.Transform(b, "hello", names, node.TransformFunc[string, string](
		func(_ context.Context, name string) (string, error) { return "hello " + name, nil }))
	pipeline.Sink(b, "print", hello, &pipelinetest.Collector[string]{})
	p, err := b.Build() // Build hands c the pipeline's counters
	if err != nil {
		panic(err)
	}
	reg := promclient.NewRegistry()
	reg.MustRegister(c)
	if _, err := p.Run(context.Background()); err != nil {
		panic(err)
	}

	// In production, serve reg with promhttp.HandlerFor instead.
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, prometheus.ItemsOut)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(text))
	// Output:
	// # HELP sluice_items_out_total Items a node handed downstream; for a sink, items written.
	// # TYPE sluice_items_out_total counter
	// sluice_items_out_total{node="hello",pipeline="greetings"} 3
	// sluice_items_out_total{node="names",pipeline="greetings"} 3
	// sluice_items_out_total{node="print",pipeline="greetings"} 3
}
