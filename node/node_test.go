package node_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/node"
)

func TestOutcomeCombineTakesTheMoreSevere(t *testing.T) {
	t.Parallel()
	order := []node.Outcome{0, node.Filtered, node.Delivered, node.Skipped, node.HandedOff, node.DeadLettered, node.Failed, node.Rejected}
	for i, a := range order {
		for j, b := range order {
			want := order[max(i, j)]
			assert.Equal(t, want, a.Combine(b), "%s with %s", a, b)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "delivered", node.Delivered.String())
	assert.Equal(t, "dead_lettered", node.DeadLettered.String())
	assert.Equal(t, "Outcome(42)", node.Outcome(42).String())
}

func TestFuncAdapters(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tr := node.TransformFunc[int, string](func(_ context.Context, x int) (string, error) {
		if x < 0 {
			return "", errBoom
		}
		return "ok", nil
	})
	out, err := tr.Process(t.Context(), 1)
	assert.NoError(t, err)
	assert.Equal(t, "ok", out)
	_, err = tr.Process(t.Context(), -1)
	assert.ErrorIs(t, err, errBoom)

	var got []int
	sink := node.SinkFunc[int](func(_ context.Context, x int) error { got = append(got, x); return nil })
	assert.NoError(t, sink.Write(t.Context(), 7))
	assert.Equal(t, []int{7}, got)

	src := node.SourceFunc[int](func(context.Context, node.Emitter[int]) error { return errBoom })
	assert.ErrorIs(t, src.Run(t.Context(), nil), errBoom)
}
