package pipeline_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Buffer(-2) on a source has two problems, the negative size and that a
// source has no input channel to size at all: Build names both, so that
// fixing the sign does not bring a second Build error for the same option.
func TestBuildNamesBothProblemsOfANegativeBufferOnASource(t *testing.T) {
	t.Parallel()
	b := pipeline.New("p")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1), pipeline.Buffer(-2))
	pipeline.Sink(b, "out", src, &pipelinetest.Collector[int]{})
	_, err := b.Build()
	assert.ElementsMatch(t, []string{
		"src: Buffer(-2): must not be negative",
		"src: Buffer: a source has no input channel; set Buffer on the nodes that read it",
	}, problems(t, err))
}
