// Package assert checks values in tests and reports a failure with
// [TestingT.Errorf], letting the test go on. It has the names, signatures
// and meaning of github.com/stretchr/testify/assert for the functions
// Sluice's core module uses, so that the core module needs no testify:
// a user's `go list -m all` then lists no test-only modules of ours.
//
// Every function returns whether its check passed. The optional
// msgAndArgs add a message to a failure: one value is printed as it is
// (a string) or with %+v, more are a format and its arguments.
//
// Values are equal when [ObjectsAreEqual] says so: [reflect.DeepEqual],
// except that two []byte are compared with [bytes.Equal] (nil and empty
// differ).
package assert

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// TestingT is what the functions report to; *testing.T, *testing.B and
// *testing.F are TestingTs. When it also has a Helper method (as they
// do), the functions call it, so a failure names the caller's line.
type TestingT interface {
	Errorf(format string, args ...any)
}

type tHelper interface {
	Helper()
}

// ObjectsAreEqual reports whether expected and actual are equal:
// [reflect.DeepEqual], except that two []byte are equal when
// [bytes.Equal] says so and both or neither are nil.
func ObjectsAreEqual(expected, actual any) bool {
	if expected == nil || actual == nil {
		return expected == actual
	}
	exp, ok := expected.([]byte)
	if !ok {
		return reflect.DeepEqual(expected, actual)
	}
	act, ok := actual.([]byte)
	if !ok {
		return false
	}
	if exp == nil || act == nil {
		return exp == nil && act == nil
	}
	return bytes.Equal(exp, act)
}

// Fail reports a failure with failureMessage and the optional message.
// It returns false.
func Fail(t TestingT, failureMessage string, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	var b strings.Builder
	b.WriteString("\n\tError:    \t")
	b.WriteString(indent(failureMessage))
	if n, ok := t.(interface{ Name() string }); ok {
		b.WriteString("\n\tTest:     \t")
		b.WriteString(n.Name())
	}
	if msg := message(msgAndArgs...); msg != "" {
		b.WriteString("\n\tMessages: \t")
		b.WriteString(indent(msg))
	}
	t.Errorf("%s", b.String())
	return false
}

// Failf is [Fail] with a format and its arguments as the message.
func Failf(t TestingT, failureMessage string, msg string, args ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	return Fail(t, failureMessage, append([]any{msg}, args...)...)
}

// FailNow reports a failure as [Fail] does, then calls t.FailNow when t
// has that method. It returns false.
func FailNow(t TestingT, failureMessage string, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	Fail(t, failureMessage, msgAndArgs...)
	if f, ok := t.(interface{ FailNow() }); ok {
		f.FailNow()
	}
	return false
}

// message formats msgAndArgs as testify does.
func message(msgAndArgs ...any) string {
	switch len(msgAndArgs) {
	case 0:
		return ""
	case 1:
		if s, ok := msgAndArgs[0].(string); ok {
			return s
		}
		return fmt.Sprintf("%+v", msgAndArgs[0])
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	// Not fmt.Sprint(msgAndArgs...): go vet would take every check for a
	// Print wrapper and flag the format directives of its callers.
	return fmt.Sprintf("%+v", msgAndArgs)
}

// indent lines a multi-line text up under the first line's label.
func indent(s string) string {
	return strings.ReplaceAll(s, "\n", "\n\t          \t")
}

// show formats a value for a failure message; a value of another type
// than the one it is compared with is shown with its type.
func show(v any) string {
	s := fmt.Sprintf("%#v", v)
	if len(s) > 4096 {
		s = s[:4096] + "<... truncated>"
	}
	return s
}

// unequal formats expected and actual for a failure message, with their
// types when these differ.
func unequal(expected, actual any) (string, string) {
	if reflect.TypeOf(expected) != reflect.TypeOf(actual) {
		return fmt.Sprintf("%T(%s)", expected, show(expected)), fmt.Sprintf("%T(%s)", actual, show(actual))
	}
	if _, ok := expected.(time.Duration); ok {
		return fmt.Sprintf("%v", expected), fmt.Sprintf("%v", actual)
	}
	return show(expected), show(actual)
}

// isFunc reports whether v is a func, which Equal cannot compare.
func isFunc(v any) bool {
	return v != nil && reflect.TypeOf(v).Kind() == reflect.Func
}

// Equal checks that expected and actual are equal ([ObjectsAreEqual]).
// Functions cannot be compared: Equal fails when either is one.
func Equal(t TestingT, expected, actual any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if isFunc(expected) || isFunc(actual) {
		return Fail(t, fmt.Sprintf("Invalid operation: %#v == %#v (cannot take func type as argument)", expected, actual), msgAndArgs...)
	}
	if !ObjectsAreEqual(expected, actual) {
		e, a := unequal(expected, actual)
		return Fail(t, "Not equal: \nexpected: "+e+"\nactual  : "+a, msgAndArgs...)
	}
	return true
}

// NotEqual checks that expected and actual are not equal
// ([ObjectsAreEqual]). Functions cannot be compared: NotEqual fails when
// either is one.
func NotEqual(t TestingT, expected, actual any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if isFunc(expected) || isFunc(actual) {
		return Fail(t, fmt.Sprintf("Invalid operation: %#v != %#v (cannot take func type as argument)", expected, actual), msgAndArgs...)
	}
	if ObjectsAreEqual(expected, actual) {
		return Fail(t, "Should not be: "+show(actual), msgAndArgs...)
	}
	return true
}

// Same checks that expected and actual are pointers of one type to the
// same variable.
func Same(t TestingT, expected, actual any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	same, ok := samePointers(expected, actual)
	if !ok {
		return Fail(t, "Both arguments must be pointers", msgAndArgs...)
	}
	if !same {
		return Fail(t, fmt.Sprintf("Not same: \nexpected: %p %s\nactual  : %p %s", expected, show(expected), actual, show(actual)), msgAndArgs...)
	}
	return true
}

// samePointers reports whether a and b point to the same variable, and
// (ok) whether both are pointers.
func samePointers(a, b any) (same, ok bool) {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	if av.Kind() != reflect.Pointer || bv.Kind() != reflect.Pointer {
		return false, false
	}
	if av.Type() != bv.Type() {
		return false, true
	}
	return a == b, true
}

// True checks that value is true.
func True(t TestingT, value bool, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !value {
		return Fail(t, "Should be true", msgAndArgs...)
	}
	return true
}

// Truef is [True] with a format and its arguments as the message.
func Truef(t TestingT, value bool, msg string, args ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	return True(t, value, append([]any{msg}, args...)...)
}

// False checks that value is false.
func False(t TestingT, value bool, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if value {
		return Fail(t, "Should be false", msgAndArgs...)
	}
	return true
}

// isNil reports whether object is nil or a nil chan, func, interface,
// map, pointer or slice.
func isNil(object any) bool {
	if object == nil {
		return true
	}
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return v.IsNil()
	}
	return false
}

// Nil checks that object is nil, or a nil chan, func, interface, map,
// pointer or slice.
func Nil(t TestingT, object any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !isNil(object) {
		return Fail(t, "Expected nil, but got: "+show(object), msgAndArgs...)
	}
	return true
}

// NotNil checks that object is not nil (see [Nil]).
func NotNil(t TestingT, object any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if isNil(object) {
		return Fail(t, "Expected value not to be nil.", msgAndArgs...)
	}
	return true
}

// isZero reports whether i is nil or its type's zero value.
func isZero(i any) bool {
	return i == nil || ObjectsAreEqual(i, reflect.Zero(reflect.TypeOf(i)).Interface())
}

// Zero checks that i is nil or the zero value of its type.
func Zero(t TestingT, i any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !isZero(i) {
		return Fail(t, "Should be zero, but was "+show(i), msgAndArgs...)
	}
	return true
}

// NotZero checks that i is not the zero value of its type.
func NotZero(t TestingT, i any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if isZero(i) {
		return Fail(t, "Should not be zero, but was "+show(i), msgAndArgs...)
	}
	return true
}

// isEmpty reports whether object is nil, a zero value, a chan, map or
// slice without elements, or a pointer to an empty value.
func isEmpty(object any) bool {
	if object == nil {
		return true
	}
	return isEmptyValue(reflect.ValueOf(object))
}

func isEmptyValue(v reflect.Value) bool {
	if v.IsZero() {
		return true
	}
	switch v.Kind() {
	case reflect.Chan, reflect.Map, reflect.Slice:
		return v.Len() == 0
	case reflect.Pointer:
		return isEmptyValue(v.Elem())
	}
	return false
}

// Empty checks that object is empty: nil, the zero value of its type
// (an empty string, an array of zeros), a chan, map or slice without
// elements, or a pointer to an empty value.
func Empty(t TestingT, object any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if !isEmpty(object) {
		return Fail(t, "Should be empty, but was "+show(object), msgAndArgs...)
	}
	return true
}

// NotEmpty checks that object is not empty (see [Empty]).
func NotEmpty(t TestingT, object any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if isEmpty(object) {
		return Fail(t, "Should NOT be empty, but was "+show(object), msgAndArgs...)
	}
	return true
}

// length returns len(x), and whether x has a length.
func length(x any) (n int, ok bool) {
	v := reflect.ValueOf(x)
	switch v.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		return v.Len(), true
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Array {
			return v.Type().Elem().Len(), true
		}
	}
	return 0, false
}

// Len checks that object (an array, chan, map, slice or string) has
// length n; it fails for a value that has no length.
func Len(t TestingT, object any, n int, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	l, ok := length(object)
	if !ok {
		return Fail(t, fmt.Sprintf("\"%v\" could not be applied builtin len()", object), msgAndArgs...)
	}
	if l != n {
		return Fail(t, fmt.Sprintf("\"%v\" should have %d item(s), but has %d", object, n, l), msgAndArgs...)
	}
	return true
}
