package assert

import (
	"fmt"
	"runtime/debug"
)

// PanicTestFunc is a function that Panics calls, expecting a panic.
type PanicTestFunc func()

// didPanic calls f and reports whether it panicked, with what value and
// stack. A panic(nil) counts, with a *runtime.PanicNilError as value.
func didPanic(f PanicTestFunc) (panicked bool, value any, stack string) {
	panicked = true
	defer func() {
		value = recover()
		if panicked {
			stack = string(debug.Stack())
		}
	}()
	f()
	panicked = false
	return
}

// Panics checks that f panics.
func Panics(t TestingT, f PanicTestFunc, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if panicked, value, _ := didPanic(f); !panicked {
		return Fail(t, fmt.Sprintf("func %#v should panic\n\tPanic value:\t%#v", f, value), msgAndArgs...)
	}
	return true
}

// PanicsWithValue checks that f panics with a value == expected. As
// testify's, it compares with ==, which itself panics for values that
// are not comparable.
func PanicsWithValue(t TestingT, expected any, f PanicTestFunc, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	panicked, value, stack := didPanic(f)
	if !panicked {
		return Fail(t, fmt.Sprintf("func %#v should panic", f), msgAndArgs...)
	}
	if value != expected {
		return Fail(t, fmt.Sprintf("func %#v should panic with value:\t%#v\n\tPanic value:\t%#v\n\tPanic stack:\t%s", f, expected, value, stack), msgAndArgs...)
	}
	return true
}

// NotPanics checks that f does not panic.
func NotPanics(t TestingT, f PanicTestFunc, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if panicked, value, stack := didPanic(f); panicked {
		return Fail(t, fmt.Sprintf("func %#v should not panic\n\tPanic value:\t%v\n\tPanic stack:\t%s", f, value, stack), msgAndArgs...)
	}
	return true
}
