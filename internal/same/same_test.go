package same_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/same"
)

type sliceHolder struct{ s []int }

func (sliceHolder) Name() string { return "" }

type named interface{ Name() string }

func TestIs(t *testing.T) {
	t.Parallel()
	var a, b named = sliceHolder{s: []int{1}}, sliceHolder{s: []int{1}}
	assert.False(t, same.Is(a, b), "an uncomparable dynamic type is never the same")
	p := &struct{ n int }{}
	assert.True(t, same.Is[any](p, p))
	assert.False(t, same.Is[any](p, &struct{ n int }{}))
	assert.True(t, same.Is[named](nil, nil))
}
