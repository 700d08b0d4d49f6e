package assert_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
)

// testify's compare finds no order between a NaN and any number (none of
// >, ==, < holds), so Greater, GreaterOrEqual, Less and LessOrEqual fail
// with "Can not compare type". Ours must too (cmp.Compare alone puts NaN
// below every number and equal to itself), or a check like
// assert.Less(t, ratio, 1.0) would pass when ratio is NaN.
func TestOrderingChecksFailOnNaNAsTestifyDoes(t *testing.T) {
	nan := math.NaN()
	calls := []struct {
		name string
		call func(assert.TestingT) bool
	}{
		{"Greater(1, NaN)", func(t assert.TestingT) bool { return assert.Greater(t, 1.0, nan) }},
		{"GreaterOrEqual(1, NaN)", func(t assert.TestingT) bool { return assert.GreaterOrEqual(t, 1.0, nan) }},
		{"GreaterOrEqual(NaN, NaN)", func(t assert.TestingT) bool { return assert.GreaterOrEqual(t, nan, nan) }},
		{"Less(NaN, 1)", func(t assert.TestingT) bool { return assert.Less(t, nan, 1.0) }},
		{"LessOrEqual(NaN, 1)", func(t assert.TestingT) bool { return assert.LessOrEqual(t, nan, 1.0) }},
		{"LessOrEqual(NaN, NaN)", func(t assert.TestingT) bool { return assert.LessOrEqual(t, nan, nan) }},
		{"Less(float32 NaN, 1)", func(t assert.TestingT) bool { return assert.Less(t, float32(nan), float32(1)) }},
	}
	for _, c := range calls {
		ft := &fakeT{}
		if c.call(ft) || len(ft.errors) == 0 {
			t.Errorf("%s passed; testify fails it (NaN has no order)", c.name)
		}
	}
}

// A condition that holds only after waitFor has passed fails Eventually,
// as testify's does, although ours calls condition on the caller's
// goroutine and so sees its late answer.
func TestEventuallyFailsWhenConditionHoldsOnlyAfterWaitFor(t *testing.T) {
	const waitFor = 5 * time.Millisecond
	ft := &fakeT{}
	ok := assert.Eventually(ft, func() bool {
		<-time.After(20 * waitFor) // the condition blocks past waitFor...
		return true                // ...and only then holds
	}, waitFor, time.Millisecond)
	if ok || len(ft.errors) == 0 {
		t.Errorf("Eventually passed with a condition that held only after waitFor (%v); testify fails it", waitFor)
	}
}
