package pipeline_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A first pipeline: read words, upper-case them on four workers (order is
// kept), and print them.
func Example() {
	b := pipeline.New("words")
	words := pipeline.Source(b, "read", pipelinetest.NewSliceSource("sluice", "moves", "water"))
	upper := pipeline.Transform(b, "upper", words,
		node.TransformFunc[string, string](func(_ context.Context, w string) (string, error) {
			return strings.ToUpper(w), nil
		}),
		pipeline.Parallel(4))
	pipeline.Sink(b, "print", upper, node.SinkFunc[string](func(_ context.Context, w string) error {
		fmt.Println(w)
		return nil
	}))

	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := p.Run(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	printed, _ := res.Node("print")
	fmt.Println("printed", printed.Out)
	// Output:
	// SLUICE
	// MOVES
	// WATER
	// printed 3
}

// Filter, FlatMap and Batch reshape a stream.
func ExampleBatch() {
	b := pipeline.New("shapes")
	lines := pipeline.Source(b, "lines", pipelinetest.NewSliceSource("a b", "", "c d e", "f"))
	nonEmpty := pipeline.Filter(b, "non-empty", lines, func(s string) bool { return s != "" })
	words := pipeline.FlatMap(b, "words", nonEmpty, func(_ context.Context, s string) ([]string, error) {
		return strings.Fields(s), nil
	})
	pairs := pipeline.Batch(b, "pairs", words, 2, 0)
	pipeline.Sink(b, "print", pairs, node.SinkFunc[[]string](func(_ context.Context, p []string) error {
		fmt.Println(p)
		return nil
	}))
	p, _ := b.Build()
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// [a b]
	// [c d]
	// [e f]
}

// Build reports every problem at once, naming the node.
func ExampleBuilder_Build() {
	b := pipeline.New("broken")
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	pipeline.Transform(b, "double", src, node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		return 2 * x, nil
	}), pipeline.Parallel(0))
	_, err := b.Build()
	fmt.Println(err)
	// Output:
	// pipeline "broken": node "double": output stream is consumed by no node: every stream needs a consumer, such as a sink
	// pipeline "broken": node "double": Parallel(0): must be at least 1
	// pipeline "broken": the pipeline has no sink
}

// EmitTracked reports when an item and everything derived from it is done:
// here a line is complete once all its words are written.
func ExampleSource_tracked() {
	b := pipeline.New("acks")
	src := pipeline.Source(b, "lines", node.SourceFunc[string](func(ctx context.Context, out node.Emitter[string]) error {
		for _, line := range []string{"to be", ""} {
			err := out.EmitTracked(ctx, line, func(o node.Outcome) {
				fmt.Printf("line %q: %s\n", line, o)
			})
			if err != nil {
				return err
			}
		}
		return nil
	}))
	words := pipeline.FlatMap(b, "words", src, func(_ context.Context, s string) ([]string, error) {
		return strings.Fields(s), nil
	})
	pipeline.Sink(b, "store", words, &pipelinetest.Collector[string]{})
	p, _ := b.Build()
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// line "to be": delivered
	// line "": filtered
}

// Graph draws the built pipeline as Mermaid (or Graphviz DOT, with
// DOT): each node with its kind, workers and the resilience layers armed
// on it, each channel with its capacity (Buffer sizes the channel in front
// of its node). WithStats adds the counts of Stats, or of a Result.
func ExamplePipeline_Graph() {
	b := pipeline.New("words", pipeline.WithResilience(func(o *resilience.Options) { o.NodeRetry.MaxRetries = 0 }))
	words := pipeline.Source(b, "read", pipelinetest.NewSliceSource("sluice", "moves", "water"))
	upper := pipeline.Map(b, "upper", words, func(_ context.Context, w string) (string, error) {
		return strings.ToUpper(w), nil
	}, pipeline.Parallel(4), pipeline.Buffer(16))
	pipeline.Sink(b, "store", upper, &pipelinetest.Collector[string]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p.Graph().Mermaid())

	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	live := p.Graph().WithStats(p.Stats()).Mermaid()
	fmt.Println(strings.Split(live, "\n")[4])
	// Output:
	// flowchart TD
	//     %% pipeline words: edges are channels, labelled with their capacity in items (hand-over batch 64)
	//     n0_read(["read<br>source"]):::source
	//     n1_upper["upper<br>transform · ×4 · retry 3"]:::work
	//     n2_store[("store<br>sink · retry 3")]:::sink
	//     n0_read -->|"16"| n1_upper
	//     n1_upper -->|"64"| n2_store
	//     classDef source fill:#e3f2fd,stroke:#1565c0
	//     classDef sink fill:#e8f5e9,stroke:#2e7d32
	//     classDef work fill:#fff8e1,stroke:#f9a825
	//     classDef structure fill:#f5f5f5,stroke:#757575
	//     n1_upper["upper<br>transform · ×4 · retry 3<br>in 3 · out 3"]:::work
}
