// Package require is package assert whose functions stop the test when
// their check fails: they report as assert does, then call t.FailNow. It
// has one function for each of assert's that takes a TestingT, and
// so the names, signatures and meaning of
// github.com/stretchr/testify/require for the functions Sluice's core
// module uses. As t.FailNow ends the calling goroutine, call them only on
// the test's own goroutine.
package require

import (
	"time"

	"github.com/sluicehq/sluice/internal/assert"
)

// TestingT is what the functions report to and stop; *testing.T,
// *testing.B and *testing.F are TestingTs.
type TestingT interface {
	Errorf(format string, args ...any)
	FailNow()
}

type tHelper interface {
	Helper()
}

// Contains is [assert.Contains], then stops the test when it failed.
func Contains(t TestingT, s, contains any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Contains(t, s, contains, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// ElementsMatch is [assert.ElementsMatch], then stops the test when it failed.
func ElementsMatch(t TestingT, listA, listB any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.ElementsMatch(t, listA, listB, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Empty is [assert.Empty], then stops the test when it failed.
func Empty(t TestingT, object any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Empty(t, object, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Equal is [assert.Equal], then stops the test when it failed.
func Equal(t TestingT, expected, actual any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Equal(t, expected, actual, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// EqualError is [assert.EqualError], then stops the test when it failed.
func EqualError(t TestingT, err error, errString string, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.EqualError(t, err, errString, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Error is [assert.Error], then stops the test when it failed.
func Error(t TestingT, err error, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Error(t, err, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// ErrorAs is [assert.ErrorAs], then stops the test when it failed.
func ErrorAs(t TestingT, err error, target any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.ErrorAs(t, err, target, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// ErrorContains is [assert.ErrorContains], then stops the test when it failed.
func ErrorContains(t TestingT, err error, contains string, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.ErrorContains(t, err, contains, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// ErrorIs is [assert.ErrorIs], then stops the test when it failed.
func ErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.ErrorIs(t, err, target, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Eventually is [assert.Eventually], then stops the test when it failed.
func Eventually(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Eventually(t, condition, waitFor, tick, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Fail reports a failure as [assert.Fail] does, then stops the test.
func Fail(t TestingT, failureMessage string, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Fail(t, failureMessage, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Failf reports a failure as [assert.Failf] does, then stops the test.
func Failf(t TestingT, failureMessage string, msg string, args ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Failf(t, failureMessage, msg, args...) {
		return
	}
	t.FailNow()
}

// False is [assert.False], then stops the test when it failed.
func False(t TestingT, value bool, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.False(t, value, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Greater is [assert.Greater], then stops the test when it failed.
func Greater(t TestingT, e1, e2 any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Greater(t, e1, e2, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// GreaterOrEqual is [assert.GreaterOrEqual], then stops the test when it failed.
func GreaterOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.GreaterOrEqual(t, e1, e2, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// InDelta is [assert.InDelta], then stops the test when it failed.
func InDelta(t TestingT, expected, actual any, delta float64, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.InDelta(t, expected, actual, delta, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// JSONEq is [assert.JSONEq], then stops the test when it failed.
func JSONEq(t TestingT, expected, actual string, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.JSONEq(t, expected, actual, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Len is [assert.Len], then stops the test when it failed.
func Len(t TestingT, object any, n int, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Len(t, object, n, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Less is [assert.Less], then stops the test when it failed.
func Less(t TestingT, e1, e2 any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Less(t, e1, e2, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// LessOrEqual is [assert.LessOrEqual], then stops the test when it failed.
func LessOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.LessOrEqual(t, e1, e2, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Nil is [assert.Nil], then stops the test when it failed.
func Nil(t TestingT, object any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Nil(t, object, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NoError is [assert.NoError], then stops the test when it failed.
func NoError(t TestingT, err error, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NoError(t, err, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotContains is [assert.NotContains], then stops the test when it failed.
func NotContains(t TestingT, s, contains any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotContains(t, s, contains, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotEmpty is [assert.NotEmpty], then stops the test when it failed.
func NotEmpty(t TestingT, object any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotEmpty(t, object, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotEqual is [assert.NotEqual], then stops the test when it failed.
func NotEqual(t TestingT, expected, actual any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotEqual(t, expected, actual, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotErrorIs is [assert.NotErrorIs], then stops the test when it failed.
func NotErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotErrorIs(t, err, target, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotNil is [assert.NotNil], then stops the test when it failed.
func NotNil(t TestingT, object any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotNil(t, object, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotPanics is [assert.NotPanics], then stops the test when it failed.
func NotPanics(t TestingT, f assert.PanicTestFunc, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotPanics(t, f, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// NotZero is [assert.NotZero], then stops the test when it failed.
func NotZero(t TestingT, i any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.NotZero(t, i, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Panics is [assert.Panics], then stops the test when it failed.
func Panics(t TestingT, f assert.PanicTestFunc, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Panics(t, f, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// PanicsWithValue is [assert.PanicsWithValue], then stops the test when it failed.
func PanicsWithValue(t TestingT, expected any, f assert.PanicTestFunc, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.PanicsWithValue(t, expected, f, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Positive is [assert.Positive], then stops the test when it failed.
func Positive(t TestingT, e any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Positive(t, e, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Regexp is [assert.Regexp], then stops the test when it failed.
func Regexp(t TestingT, rx, str any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Regexp(t, rx, str, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Same is [assert.Same], then stops the test when it failed.
func Same(t TestingT, expected, actual any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Same(t, expected, actual, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// True is [assert.True], then stops the test when it failed.
func True(t TestingT, value bool, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.True(t, value, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// Truef is [assert.Truef], then stops the test when it failed.
func Truef(t TestingT, value bool, msg string, args ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Truef(t, value, msg, args...) {
		return
	}
	t.FailNow()
}

// Zero is [assert.Zero], then stops the test when it failed.
func Zero(t TestingT, i any, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if assert.Zero(t, i, msgAndArgs...) {
		return
	}
	t.FailNow()
}

// FailNow reports a failure as [assert.Fail] does, then stops the test.
func FailNow(t TestingT, failureMessage string, msgAndArgs ...any) {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	assert.Fail(t, failureMessage, msgAndArgs...)
	t.FailNow()
}
