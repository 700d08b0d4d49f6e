package assert

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"reflect"
	"time"
)

var timeType = reflect.TypeFor[time.Time]()

// order compares a and b, values of one kind: integers, floats, strings,
// time.Time or []byte. It returns -1, 0 or +1, and whether a and b can be
// compared.
func order(a, b any) (int, bool) {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	if av.Kind() != bv.Kind() {
		return 0, false
	}
	switch av.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp.Compare(av.Int(), bv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return cmp.Compare(av.Uint(), bv.Uint()), true
	case reflect.Float32, reflect.Float64:
		// NaN is ordered with nothing, as testify has it: a check on a NaN
		// fails rather than passes.
		if math.IsNaN(av.Float()) || math.IsNaN(bv.Float()) {
			return 0, false
		}
		return cmp.Compare(av.Float(), bv.Float()), true
	case reflect.String:
		return cmp.Compare(av.String(), bv.String()), true
	case reflect.Struct:
		if av.Type().ConvertibleTo(timeType) && bv.Type().ConvertibleTo(timeType) {
			at := av.Convert(timeType).Interface().(time.Time)
			bt := bv.Convert(timeType).Interface().(time.Time)
			return at.Compare(bt), true
		}
	case reflect.Slice:
		if av.Type().Elem().Kind() == reflect.Uint8 && bv.Type().Elem().Kind() == reflect.Uint8 {
			return bytes.Compare(av.Bytes(), bv.Bytes()), true
		}
	}
	return 0, false
}

// compareTwo checks that order(e1, e2) is one of allowed.
func compareTwo(t TestingT, e1, e2 any, allowed []int, failure string, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if reflect.ValueOf(e1).Kind() != reflect.ValueOf(e2).Kind() {
		return Fail(t, fmt.Sprintf("Elements should be the same type: %T and %T", e1, e2), msgAndArgs...)
	}
	o, ok := order(e1, e2)
	if !ok {
		return Fail(t, fmt.Sprintf("Can not compare type %q", fmt.Sprintf("%T", e1)), msgAndArgs...)
	}
	for _, a := range allowed {
		if o == a {
			return true
		}
	}
	return Fail(t, failure, msgAndArgs...)
}

// Greater checks that e1 > e2. Both must be of one kind: an integer,
// float or string kind, time.Time or []byte.
func Greater(t TestingT, e1, e2 any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	return compareTwo(t, e1, e2, []int{1}, fmt.Sprintf(`"%v" is not greater than "%v"`, e1, e2), msgAndArgs...)
}

// GreaterOrEqual checks that e1 >= e2 (see [Greater]).
func GreaterOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	return compareTwo(t, e1, e2, []int{1, 0}, fmt.Sprintf(`"%v" is not greater than or equal to "%v"`, e1, e2), msgAndArgs...)
}

// Less checks that e1 < e2 (see [Greater]).
func Less(t TestingT, e1, e2 any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	return compareTwo(t, e1, e2, []int{-1}, fmt.Sprintf(`"%v" is not less than "%v"`, e1, e2), msgAndArgs...)
}

// LessOrEqual checks that e1 <= e2 (see [Greater]).
func LessOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	return compareTwo(t, e1, e2, []int{-1, 0}, fmt.Sprintf(`"%v" is not less than or equal to "%v"`, e1, e2), msgAndArgs...)
}

// Positive checks that e > 0, the zero value of its type (see [Greater]).
func Positive(t TestingT, e any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if e == nil {
		return Fail(t, "Can not compare type \"<nil>\"", msgAndArgs...)
	}
	zero := reflect.Zero(reflect.TypeOf(e)).Interface()
	return compareTwo(t, e, zero, []int{1}, fmt.Sprintf(`"%v" is not positive`, e), msgAndArgs...)
}

// toFloat returns x, a value of an integer or float kind, as a float64.
func toFloat(x any) (float64, bool) {
	v := reflect.ValueOf(x)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(v.Uint()), true
	case reflect.Float32, reflect.Float64:
		return v.Float(), true
	}
	return 0, false
}

// InDelta checks that expected and actual, numbers, differ by at most
// delta. Two NaNs are within any delta of each other; a NaN and a number
// are not.
func InDelta(t TestingT, expected, actual any, delta float64, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	af, aok := toFloat(expected)
	bf, bok := toFloat(actual)
	if !aok || !bok {
		return Fail(t, "Parameters must be numerical", msgAndArgs...)
	}
	if math.IsNaN(af) && math.IsNaN(bf) {
		return true
	}
	if math.IsNaN(af) {
		return Fail(t, "Expected must not be NaN", msgAndArgs...)
	}
	if math.IsNaN(bf) {
		return Fail(t, fmt.Sprintf("Expected %v with delta %v, but was NaN", expected, delta), msgAndArgs...)
	}
	if dt := af - bf; dt < -delta || dt > delta {
		return Fail(t, fmt.Sprintf("Max difference between %v and %v allowed is %v, but difference was %v", expected, actual, delta, dt), msgAndArgs...)
	}
	return true
}
