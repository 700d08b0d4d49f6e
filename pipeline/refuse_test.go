package pipeline_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Refuse makes Build fail naming the node, with each refusal a
// *BuildError of its own, joined with the problems Build finds itself; a
// nil error refuses nothing.
func TestRefuse(t *testing.T) {
	t.Parallel()
	errTable := errors.New("conn: Table is empty")
	errSize := errors.New("conn: BatchSize -1 is negative")
	b := pipeline.New("refuse")
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2))
	pipeline.Sink(b, "store", src, &pipelinetest.Collector[int]{},
		pipeline.Refuse(errTable), pipeline.Refuse(nil), pipeline.Refuse(errSize), pipeline.Buffer(-5))
	_, err := b.Build()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	assert.ErrorIs(t, err, errTable)
	assert.ErrorIs(t, err, errSize)
	assert.ErrorContains(t, err, `pipeline "refuse": node "store": conn: Table is empty`)
	assert.ErrorContains(t, err, `node "store": conn: BatchSize -1 is negative`)
	assert.ErrorContains(t, err, "Buffer(-5)", "joined with Build's own problems")
	var problems []*pipeline.BuildError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var be *pipeline.BuildError
		require.ErrorAs(t, e, &be)
		problems = append(problems, be)
	}
	assert.Len(t, problems, 3)

	ok := pipeline.New("refuse-nil")
	pipeline.Sink(ok, "store", pipeline.Source(ok, "read", pipelinetest.NewSliceSource(1)), &pipelinetest.Collector[int]{}, pipeline.Refuse(nil))
	_, err = ok.Build()
	assert.NoError(t, err)
}
