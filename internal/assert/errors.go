package assert

import (
	"errors"
	"fmt"
	"strings"
)

// NoError checks that err is nil.
func NoError(t TestingT, err error, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if err != nil {
		return Fail(t, fmt.Sprintf("Received unexpected error:\n%+v", err), msgAndArgs...)
	}
	return true
}

// Error checks that err is not nil.
func Error(t TestingT, err error, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if err == nil {
		return Fail(t, "An error is expected but got nil.", msgAndArgs...)
	}
	return true
}

// EqualError checks that err is not nil and its message is errString.
func EqualError(t TestingT, err error, errString string, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !Error(t, err, msgAndArgs...) {
		return false
	}
	if got := err.Error(); got != errString {
		return Fail(t, fmt.Sprintf("Error message not equal:\nexpected: %q\nactual  : %q", errString, got), msgAndArgs...)
	}
	return true
}

// ErrorContains checks that err is not nil and its message contains
// contains.
func ErrorContains(t TestingT, err error, contains string, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !Error(t, err, msgAndArgs...) {
		return false
	}
	if got := err.Error(); !strings.Contains(got, contains) {
		return Fail(t, fmt.Sprintf("Error %q does not contain %q", got, contains), msgAndArgs...)
	}
	return true
}

// chain lists the messages of err's chain for a failure message.
func chain(err error) string {
	if err == nil {
		return ""
	}
	var b strings.Builder
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		fmt.Fprintf(&b, "\n\t%q (%T)", e.Error(), e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return b.String()
}

// ErrorIs checks that [errors.Is](err, target).
func ErrorIs(t TestingT, err, target error, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if errors.Is(err, target) {
		return true
	}
	var expected string
	if target != nil {
		expected = fmt.Sprintf("%q", target.Error())
	} else {
		expected = "nil"
	}
	if err == nil {
		return Fail(t, "Expected error with "+expected+" in chain but got nil.", msgAndArgs...)
	}
	return Fail(t, fmt.Sprintf("Target error should be in err chain:\nexpected: %s\nin chain: %s", expected, chain(err)), msgAndArgs...)
}

// NotErrorIs checks that not [errors.Is](err, target).
func NotErrorIs(t TestingT, err, target error, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !errors.Is(err, target) {
		return true
	}
	var found string
	if target != nil {
		found = fmt.Sprintf("%q", target.Error())
	} else {
		found = "nil"
	}
	return Fail(t, fmt.Sprintf("Target error should not be in err chain:\nfound   : %s\nin chain: %s", found, chain(err)), msgAndArgs...)
}

// ErrorAs checks that [errors.As](err, target), which then has set
// target. As errors.As, it panics when target is not a non-nil pointer
// to an interface or to a type that implements error.
func ErrorAs(t TestingT, err error, target any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if errors.As(err, target) {
		return true
	}
	if err == nil {
		return Fail(t, fmt.Sprintf("An error is expected but got nil.\nexpected: %T", target), msgAndArgs...)
	}
	return Fail(t, fmt.Sprintf("Should be in error chain:\nexpected: %T\nin chain: %s", target, chain(err)), msgAndArgs...)
}
