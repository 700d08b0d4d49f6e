package assert

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// includes reports whether list (a string, map, array or slice) holds
// element (a substring, a key, an element), and (ok) whether list is one
// of those.
func includes(list, element any) (ok, found bool) {
	v := reflect.ValueOf(list)
	switch v.Kind() {
	case reflect.String:
		e := reflect.ValueOf(element)
		if e.Kind() != reflect.String {
			return false, false
		}
		return true, strings.Contains(v.String(), e.String())
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if ObjectsAreEqual(k.Interface(), element) {
				return true, true
			}
		}
		return true, false
	case reflect.Array, reflect.Slice:
		for i := range v.Len() {
			if ObjectsAreEqual(v.Index(i).Interface(), element) {
				return true, true
			}
		}
		return true, false
	}
	return false, false
}

// Contains checks that s (a string, map, array or slice) contains
// contains: a substring, a key ([ObjectsAreEqual]) or an element
// ([ObjectsAreEqual]).
func Contains(t TestingT, s, contains any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	ok, found := includes(s, contains)
	if !ok {
		return Fail(t, fmt.Sprintf("%s could not be applied builtin len() or holds no %T", show(s), contains), msgAndArgs...)
	}
	if !found {
		return Fail(t, fmt.Sprintf("%s does not contain %s", show(s), show(contains)), msgAndArgs...)
	}
	return true
}

// NotContains checks that s (a string, map, array or slice) does not
// contain contains (see [Contains]).
func NotContains(t TestingT, s, contains any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	ok, found := includes(s, contains)
	if !ok {
		return Fail(t, fmt.Sprintf("%s could not be applied builtin len() or holds no %T", show(s), contains), msgAndArgs...)
	}
	if found {
		return Fail(t, fmt.Sprintf("%s should not contain %s", show(s), show(contains)), msgAndArgs...)
	}
	return true
}

// ElementsMatch checks that listA and listB (arrays or slices) hold the
// same elements ([ObjectsAreEqual]) as often each, in any order. Two
// empty lists match.
func ElementsMatch(t TestingT, listA, listB any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	if isEmpty(listA) && isEmpty(listB) {
		return true
	}
	a, b := reflect.ValueOf(listA), reflect.ValueOf(listB)
	for _, v := range []reflect.Value{a, b} {
		if k := v.Kind(); k != reflect.Array && k != reflect.Slice {
			return Fail(t, fmt.Sprintf("%s has an unsupported type %s, expecting array or slice", show(v.Interface()), k), msgAndArgs...)
		}
	}
	var extraA, extraB []any
	used := make([]bool, b.Len())
	for i := range a.Len() {
		e := a.Index(i).Interface()
		found := false
		for j := range b.Len() {
			if !used[j] && ObjectsAreEqual(b.Index(j).Interface(), e) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			extraA = append(extraA, e)
		}
	}
	for j := range b.Len() {
		if !used[j] {
			extraB = append(extraB, b.Index(j).Interface())
		}
	}
	if len(extraA) == 0 && len(extraB) == 0 {
		return true
	}
	var msg strings.Builder
	msg.WriteString("elements differ")
	if len(extraA) > 0 {
		msg.WriteString("\n\nextra elements in list A:\n" + show(extraA))
	}
	if len(extraB) > 0 {
		msg.WriteString("\n\nextra elements in list B:\n" + show(extraB))
	}
	msg.WriteString("\n\nlistA:\n" + show(listA) + "\n\nlistB:\n" + show(listB))
	return Fail(t, msg.String(), msgAndArgs...)
}

// Regexp checks that str matches rx, a *regexp.Regexp or a pattern (any
// other value, formatted with %v). A str that is not a string or []byte
// is matched formatted with %v.
func Regexp(t TestingT, rx, str any, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	r, ok := rx.(*regexp.Regexp)
	if !ok {
		var err error
		if r, err = regexp.Compile(fmt.Sprint(rx)); err != nil {
			return Fail(t, fmt.Sprintf("Invalid regular expression %q: %v", fmt.Sprint(rx), err), msgAndArgs...)
		}
	}
	var match bool
	switch s := str.(type) {
	case []byte:
		match = r.Match(s)
	case string:
		match = r.MatchString(s)
	default:
		match = r.MatchString(fmt.Sprint(s))
	}
	if !match {
		return Fail(t, fmt.Sprintf("Expect %q to match %q", fmt.Sprint(str), r.String()), msgAndArgs...)
	}
	return true
}

// JSONEq checks that expected and actual are JSON documents of the same
// value (key order and spacing aside).
func JSONEq(t TestingT, expected, actual string, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	var e, a any
	if err := json.Unmarshal([]byte(expected), &e); err != nil {
		return Fail(t, fmt.Sprintf("Expected value (%q) is not valid json.\nJSON parsing error: %v", expected, err), msgAndArgs...)
	}
	if err := json.Unmarshal([]byte(actual), &a); err != nil {
		return Fail(t, fmt.Sprintf("Input (%q) needs to be valid json.\nJSON parsing error: %v", actual, err), msgAndArgs...)
	}
	if !ObjectsAreEqual(e, a) {
		return Fail(t, fmt.Sprintf("Not equal JSON:\nexpected: %s\nactual  : %s", expected, actual), msgAndArgs...)
	}
	return true
}
