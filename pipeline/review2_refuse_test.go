package pipeline_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// review2OptionError is a connector's struct error for a bad option.
type review2OptionError struct{ Field string }

func (e *review2OptionError) Error() string { return "conn: bad option " + e.Field }

// Refuse's doc says "A nil err refuses nothing". A connector that keeps
// its problem in a variable of its own struct error type, nil when the
// options are fine, hands Refuse a typed nil: Build then fails with the
// problem "<nil>" (the Error method is not even called: fmt prints the nil
// pointer), refusing a pipeline whose options are fine.
func TestReview2RefuseTypedNilRefusesNothing(t *testing.T) {
	t.Parallel()
	var problem *review2OptionError // nil: the options are fine
	b := pipeline.New("refuse-typed-nil")
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2))
	pipeline.Sink(b, "store", src, &pipelinetest.Collector[int]{}, pipeline.Refuse(problem))
	_, err := b.Build()
	assert.NoError(t, err, "a typed-nil error refuses nothing, as a nil one")
}
