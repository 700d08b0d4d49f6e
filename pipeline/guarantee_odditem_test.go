package pipeline_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// No item, however odd, crashes the process on its way to a dead-letter
// file: cyclic maps and slices and unencodable values are dead-lettered
// through the engine, each landing as one line with its type and a
// bounded rendering.
func TestOddItemsAreDeadLetteredToAFile(t *testing.T) {
	t.Parallel()
	m := map[string]any{"id": 1}
	m["self"] = m
	s := []any{2, nil}
	s[1] = s
	items := []any{m, s, make(chan int), func() {}, 3}

	path := filepath.Join(t.TempDir(), "dl.jsonl")
	dlq, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	b := pipeline.New("odd", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.DeadLetter
	}))
	src := pipeline.Source[any](b, "src", pipelinetest.NewSliceSource(items...))
	reject := pipeline.Transform[any, any](b, "reject", src, node.TransformFunc[any, any](func(_ context.Context, v any) (any, error) {
		if _, ok := v.(int); ok {
			return v, nil
		}
		return nil, resilience.MarkPermanent(errors.New("odd item"))
	}))
	out := &pipelinetest.Collector[any]{}
	pipeline.Sink(b, "sink", reject, out)
	_, err = build(t, b).Run(t.Context())
	require.NoError(t, err)
	require.NoError(t, dlq.Close())
	assert.Equal(t, []any{3}, out.Items())

	var types, texts []string
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		assert.NotEmpty(t, env.ItemError)
		types = append(types, env.ItemType)
		texts = append(texts, env.ItemText)
	}
	assert.Equal(t, []string{"map[string]interface {}", "[]interface {}", "chan int", "func()"}, types)
	assert.Equal(t, "map[id:1 self:<cycle>]", texts[0])
	assert.Equal(t, "[2 <cycle>]", texts[1])
}
