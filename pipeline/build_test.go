package pipeline_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// problems returns "node: message" for every BuildError joined in err.
func problems(t *testing.T, err error) []string {
	t.Helper()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "Build joins its errors")
	var out []string
	for _, e := range j.Unwrap() {
		var be *pipeline.BuildError
		require.ErrorAs(t, e, &be)
		out = append(out, be.Node+": "+be.Err.Error())
	}
	return out
}

func TestBuildReportsEveryProblemNamingTheNode(t *testing.T) {
	t.Parallel()
	other := pipeline.New("other")
	foreign := pipeline.Source(other, "foreign", pipelinetest.NewSliceSource(1))

	b := pipeline.New("orders", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.Backoff = o.ItemRetry.Backoff.WithFactor(0.5)
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2))
	pipeline.Source(b, "read", pipelinetest.NewSliceSource(3)) // duplicate name, stream unused
	a := pipeline.Transform(b, "", src, double())              // no name
	pipeline.Transform(b, "price", a, double(), pipeline.Parallel(0),
		pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	pipeline.Sink(b, "store", foreign, &pipelinetest.Collector[int]{})
	pipeline.Sink(b, "zero", pipeline.Stream[int]{}, &pipelinetest.Collector[int]{})
	pipeline.Batch(b, "batch", src, 0, -time.Second)

	_, err := b.Build()
	got := problems(t, err)
	assert.ElementsMatch(t, []string{
		`store: input comes from another builder (pipeline "other")`,
		`zero: input is a zero Stream, not the output of a node`,
		`read: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
		`read: name used by another node`,
		`read: output stream is consumed by no node: every stream needs a consumer, such as a sink`,
		`read: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
		`: node 3 (transform) has no name`,
		`: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
		`price: Parallel(0): must be at least 1`,
		`price: output stream is consumed by no node: every stream needs a consumer, such as a sink`,
		`price: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
		`price: resilience: OnItemFailure = dead_letter: the pipeline has no dead-letter sink (WithDeadLetter)`,
		`store: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
		`zero: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
		`batch: Batch size 0: must be at least 1`,
		`batch: Batch linger -1s: must not be negative`,
		`batch: output stream is consumed by no node: every stream needs a consumer, such as a sink`,
		`batch: resilience: ItemRetry.Backoff.Factor = 0.5: must be at least 1: a smaller factor shrinks the delays`,
	}, got)
	assert.Contains(t, err.Error(), `pipeline "orders": node "price": Parallel(0): must be at least 1`)
}

func TestBuildNeedsSourceAndSink(t *testing.T) {
	t.Parallel()
	_, err := pipeline.New("empty").Build()
	assert.Equal(t, []string{": the pipeline has no sink"}, problems(t, err))

	b := pipeline.New("nosink")
	pipeline.Source(b, "src", pipelinetest.NewSliceSource(1))
	_, err = b.Build()
	assert.ElementsMatch(t, []string{
		"src: output stream is consumed by no node: every stream needs a consumer, such as a sink",
		": the pipeline has no sink",
	}, problems(t, err))

	// A pipeline whose only nodes hang off a foreign stream has no source.
	other := pipeline.New("other")
	foreign := pipeline.Source(other, "x", pipelinetest.NewSliceSource(1))
	b = pipeline.New("nosource")
	pipeline.Sink(b, "sink", foreign, &pipelinetest.Collector[int]{})
	_, err = b.Build()
	assert.Contains(t, problems(t, err), ": the pipeline has no source")
}

func TestBuildRefusesNilFunctionsAndMisplacedParallel(t *testing.T) {
	t.Parallel()
	b := pipeline.New("nil")
	src := pipeline.Source[int](b, "src", nil, pipeline.Parallel(2))
	f := pipeline.Filter(b, "filter", src, nil)
	m := pipeline.FlatMap[int, int](b, "flat", f, nil)
	u := pipeline.Unbatch(b, "unbatch", pipeline.Batch(b, "batch", m, 2, 0, pipeline.Parallel(2)), pipeline.Parallel(3))
	tr := pipeline.Transform[int, int](b, "tr", u, nil)
	pipeline.Sink[int](b, "sink", tr, nil)
	pipeline.Sink(b, "merge-sink", pipeline.Merge[int](b, "merge"), &pipelinetest.Collector[int]{})
	_, err := b.Build()
	assert.ElementsMatch(t, []string{
		"src: source is nil",
		"src: Parallel: only transforms, sinks, filters, flat maps and routes run in parallel",
		"filter: filter function is nil",
		"flat: flat map function is nil",
		"batch: Parallel: only transforms, sinks, filters, flat maps and routes run in parallel",
		"unbatch: Parallel: only transforms, sinks, filters, flat maps and routes run in parallel",
		"tr: transform is nil",
		"sink: sink is nil",
		"merge: merge has no input",
	}, problems(t, err))
}

func TestBuildOptionsOfThePipeline(t *testing.T) {
	t.Parallel()
	// A negative drain timeout was taken as none: drains unbounded (a
	// review's finding).
	b := pipeline.New("", pipeline.WithBuffer(-1), pipeline.WithHandOverBatch(0),
		pipeline.WithDeadLetterRetry(-1, resilience.Constant(-time.Second)), pipeline.WithDrainTimeout(-time.Second))
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), &pipelinetest.Collector[int]{},
		pipeline.Buffer(-2))
	_, err := b.Build()
	assert.ElementsMatch(t, []string{
		": the pipeline has no name",
		": WithBuffer(-1): must not be negative",
		": WithHandOverBatch(0): must be at least 1",
		": WithDrainTimeout(-1s): must not be negative",
		": WithDeadLetterRetry(-1, ...): must be in [0, 100]",
		": WithDeadLetterRetry backoff: resilience: Base = -1s: must not be negative",
		"sink: Buffer(-2): must not be negative",
	}, problems(t, err))
}

// A pipeline or node name that is not valid UTF-8 fails Build: observers
// use names as labels, and a Prometheus scrape fails whole on such a label
// (a review's finding: Build passed, and every scrape of the registry
// failed).
func TestBuildRefusesANameThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	b := pipeline.New("orders\xff")
	pipeline.Sink(b, "sink\xfe", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), &pipelinetest.Collector[int]{})
	_, err := b.Build()
	assert.ElementsMatch(t, []string{
		`: the pipeline's name "orders\xff" is not valid UTF-8: observers use names as labels, and Prometheus refuses such a label`,
		"sink\xfe" + `: node name "sink\xfe" is not valid UTF-8: observers use names as labels, and Prometheus refuses such a label`,
	}, problems(t, err))
	b = pipeline.New("commandes-été")
	pipeline.Sink(b, "écrire", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), &pipelinetest.Collector[int]{})
	_, err = b.Build()
	assert.NoError(t, err, "any valid UTF-8 is a name")
}

func TestBuildAcceptsDeadLetterWithASink(t *testing.T) {
	t.Parallel()
	b := pipeline.New("ok", pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), &pipelinetest.Collector[int]{})
	_, err := b.Build()
	require.NoError(t, err)
	assert.False(t, errors.Is(err, pipeline.ErrInvalid))
}

func TestBuildRefusesMeaninglessOptions(t *testing.T) {
	t.Parallel()
	b := pipeline.New("meaningless")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1), pipeline.Buffer(10))
	pipeline.Sink(b, "sink", pipeline.Merge(b, "twice", src, src), &pipelinetest.Collector[int]{})
	_, err := b.Build()
	assert.ElementsMatch(t, []string{
		"src: Buffer: a source has no input channel; set Buffer on the nodes that read it",
		`twice: merge takes the output of "src" twice: every item would arrive twice`,
	}, problems(t, err))
}
