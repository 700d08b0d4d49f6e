package pipeline_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
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
	type link struct{ Next *link }
	var deep *link // deep enough to overflow a JSON encoder's stack
	for range 2_000_000 {
		deep = &link{Next: deep}
	}
	items := []any{m, s, make(chan int), func() {}, 3, deep, "bad error"}

	path := filepath.Join(t.TempDir(), "dl.jsonl")
	dlq, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	b := pipeline.New("odd", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.DeadLetter
	}))
	src := pipeline.Source[any](b, "src", pipelinetest.NewSliceSource(items...))
	reject := pipeline.Transform[any, any](b, "reject", src, node.TransformFunc[any, any](func(_ context.Context, v any) (any, error) {
		switch v.(type) {
		case int:
			return v, nil
		case string:
			return nil, panickyError{}
		}
		return nil, resilience.MarkPermanent(errors.New("odd item"))
	}))
	out := &pipelinetest.Collector[any]{}
	pipeline.Sink(b, "sink", reject, out)
	_, err = build(t, b).Run(t.Context())
	require.NoError(t, err)
	require.NoError(t, dlq.Close())
	assert.Equal(t, []any{3}, out.Items())

	var types, texts, errs []string
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		types = append(types, env.ItemType)
		texts = append(texts, env.ItemText)
		errs = append(errs, env.ErrText)
	}
	assert.Equal(t, []string{"map[string]interface {}", "[]interface {}", "chan int", "func()",
		"*github.com/sluicehq/sluice/pipeline_test.link", "string"}, types)
	assert.Equal(t, "map[id:1 self:<cycle>]", texts[0])
	assert.Equal(t, "[2 <cycle>]", texts[1])
	assert.Equal(t, "(the error's Error method panicked: Error bug)", errs[5])
}

// panickyError is an error whose Error method panics.
type panickyError struct{}

func (panickyError) Error() string { panic("Error bug") }
