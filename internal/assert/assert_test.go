package assert_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
)

// fakeT records what a check reports.
type fakeT struct {
	errors  []string
	helpers int
	failNow int
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeT) Helper()  { f.helpers++ }
func (f *fakeT) FailNow() { f.failNow++ }

type point struct{ X, Y int }

type wrapped struct{ err error }

func (w wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

var errSentinel = errors.New("sentinel")

// cases lists, per function, calls that must pass and calls that must
// fail.
var cases = []struct {
	name string
	pass func(assert.TestingT) bool
	fail func(assert.TestingT) bool
}{
	{"Equal", func(t assert.TestingT) bool { return assert.Equal(t, point{1, 2}, point{1, 2}) },
		func(t assert.TestingT) bool { return assert.Equal(t, point{1, 2}, point{2, 1}) }},
	{"Equal/bytes", func(t assert.TestingT) bool { return assert.Equal(t, []byte("ab"), []byte("ab")) },
		func(t assert.TestingT) bool { return assert.Equal(t, []byte{}, []byte(nil)) }},
	{"Equal/types", func(t assert.TestingT) bool { return assert.Equal(t, int64(3), int64(3)) },
		func(t assert.TestingT) bool { return assert.Equal(t, 3, int64(3)) }},
	{"Equal/nil", func(t assert.TestingT) bool { return assert.Equal(t, nil, nil) },
		func(t assert.TestingT) bool { return assert.Equal(t, nil, (*int)(nil)) }},
	{"Equal/func", func(t assert.TestingT) bool { return assert.Equal(t, 1, 1) },
		func(t assert.TestingT) bool { return assert.Equal(t, func() {}, nil) }},
	{"NotEqual", func(t assert.TestingT) bool { return assert.NotEqual(t, "a", "b") },
		func(t assert.TestingT) bool { return assert.NotEqual(t, []int{1}, []int{1}) }},
	{"Same", func(t assert.TestingT) bool { p := &point{}; return assert.Same(t, p, p) },
		func(t assert.TestingT) bool { return assert.Same(t, &point{}, &point{}) }},
	{"Same/values", func(t assert.TestingT) bool { p := &point{}; return assert.Same(t, p, p) },
		func(t assert.TestingT) bool { return assert.Same(t, point{}, point{}) }},
	{"True", func(t assert.TestingT) bool { return assert.True(t, true) },
		func(t assert.TestingT) bool { return assert.True(t, false) }},
	{"Truef", func(t assert.TestingT) bool { return assert.Truef(t, true, "%d", 1) },
		func(t assert.TestingT) bool { return assert.Truef(t, false, "%d", 1) }},
	{"False", func(t assert.TestingT) bool { return assert.False(t, false) },
		func(t assert.TestingT) bool { return assert.False(t, true) }},
	{"Nil", func(t assert.TestingT) bool { return assert.Nil(t, (map[int]int)(nil)) },
		func(t assert.TestingT) bool { return assert.Nil(t, 0) }},
	{"NotNil", func(t assert.TestingT) bool { return assert.NotNil(t, &point{}) },
		func(t assert.TestingT) bool { return assert.NotNil(t, (*point)(nil)) }},
	{"Zero", func(t assert.TestingT) bool { return assert.Zero(t, point{}) },
		func(t assert.TestingT) bool { return assert.Zero(t, time.Nanosecond) }},
	{"Zero/emptyslice", func(t assert.TestingT) bool { return assert.Zero(t, []int(nil)) },
		func(t assert.TestingT) bool { return assert.Zero(t, []int{}) }},
	{"NotZero", func(t assert.TestingT) bool { return assert.NotZero(t, 1) },
		func(t assert.TestingT) bool { return assert.NotZero(t, "") }},
	{"Empty", func(t assert.TestingT) bool { return assert.Empty(t, map[string]int{}) },
		func(t assert.TestingT) bool { return assert.Empty(t, []int{0}) }},
	{"Empty/pointer", func(t assert.TestingT) bool { s := ""; return assert.Empty(t, &s) },
		func(t assert.TestingT) bool { s := "x"; return assert.Empty(t, &s) }},
	{"Empty/chan", func(t assert.TestingT) bool { return assert.Empty(t, make(chan int, 1)) },
		func(t assert.TestingT) bool { c := make(chan int, 1); c <- 1; return assert.Empty(t, c) }},
	{"NotEmpty", func(t assert.TestingT) bool { return assert.NotEmpty(t, "x") },
		func(t assert.TestingT) bool { return assert.NotEmpty(t, point{}) }},
	{"Len/slice", func(t assert.TestingT) bool { return assert.Len(t, []int{1, 2}, 2) },
		func(t assert.TestingT) bool { return assert.Len(t, []int{1, 2}, 3) }},
	{"Len/map", func(t assert.TestingT) bool { return assert.Len(t, map[int]int{1: 1}, 1) },
		func(t assert.TestingT) bool { return assert.Len(t, map[int]int{}, 1) }},
	{"Len/string", func(t assert.TestingT) bool { return assert.Len(t, "abc", 3) },
		func(t assert.TestingT) bool { return assert.Len(t, "abc", 2) }},
	{"Len/chan", func(t assert.TestingT) bool { c := make(chan int, 2); c <- 1; return assert.Len(t, c, 1) },
		func(t assert.TestingT) bool { return assert.Len(t, make(chan int, 2), 2) }},
	{"Len/nolen", func(t assert.TestingT) bool { return assert.Len(t, [2]int{}, 2) },
		func(t assert.TestingT) bool { return assert.Len(t, 5, 0) }},
	{"Contains/string", func(t assert.TestingT) bool { return assert.Contains(t, "hello world", "o w") },
		func(t assert.TestingT) bool { return assert.Contains(t, "hello", "world") }},
	{"Contains/slice", func(t assert.TestingT) bool { return assert.Contains(t, []point{{1, 2}}, point{1, 2}) },
		func(t assert.TestingT) bool { return assert.Contains(t, []point{{1, 2}}, point{2, 1}) }},
	{"Contains/map", func(t assert.TestingT) bool { return assert.Contains(t, map[string]int{"k": 1}, "k") },
		func(t assert.TestingT) bool { return assert.Contains(t, map[string]int{"k": 1}, 1) }},
	{"Contains/notalist", func(t assert.TestingT) bool { return assert.Contains(t, [1]int{7}, 7) },
		func(t assert.TestingT) bool { return assert.Contains(t, 7, 7) }},
	{"NotContains", func(t assert.TestingT) bool { return assert.NotContains(t, []string{"a"}, "b") },
		func(t assert.TestingT) bool { return assert.NotContains(t, "abc", "b") }},
	{"NotContains/notalist", func(t assert.TestingT) bool { return assert.NotContains(t, "abc", "d") },
		func(t assert.TestingT) bool { return assert.NotContains(t, nil, "d") }},
	{"ElementsMatch", func(t assert.TestingT) bool { return assert.ElementsMatch(t, []int{1, 2, 2}, []int{2, 1, 2}) },
		func(t assert.TestingT) bool { return assert.ElementsMatch(t, []int{1, 2, 2}, []int{1, 1, 2}) }},
	{"ElementsMatch/empty", func(t assert.TestingT) bool { return assert.ElementsMatch(t, []int{}, []int(nil)) },
		func(t assert.TestingT) bool { return assert.ElementsMatch(t, []int{1}, []int{}) }},
	{"ElementsMatch/notalist", func(t assert.TestingT) bool { return assert.ElementsMatch(t, [2]int{1, 2}, []int{2, 1}) },
		func(t assert.TestingT) bool { return assert.ElementsMatch(t, 1, []int{1}) }},
	{"Regexp", func(t assert.TestingT) bool { return assert.Regexp(t, `^a+b$`, "aab") },
		func(t assert.TestingT) bool { return assert.Regexp(t, regexp.MustCompile(`^a+b$`), "abb") }},
	{"Regexp/nonstring", func(t assert.TestingT) bool { return assert.Regexp(t, `^4\d$`, 42) },
		func(t assert.TestingT) bool { return assert.Regexp(t, `(`, "(") }},
	{"JSONEq", func(t assert.TestingT) bool { return assert.JSONEq(t, `{"a":1,"b":[2]}`, `{ "b":[2], "a":1.0 }`) },
		func(t assert.TestingT) bool { return assert.JSONEq(t, `{"a":1}`, `{"a":2}`) }},
	{"JSONEq/invalid", func(t assert.TestingT) bool { return assert.JSONEq(t, `[]`, `[]`) },
		func(t assert.TestingT) bool { return assert.JSONEq(t, `[]`, `[`) }},
	{"NoError", func(t assert.TestingT) bool { return assert.NoError(t, nil) },
		func(t assert.TestingT) bool { return assert.NoError(t, io.EOF) }},
	{"Error", func(t assert.TestingT) bool { return assert.Error(t, io.EOF) },
		func(t assert.TestingT) bool { return assert.Error(t, nil) }},
	{"EqualError", func(t assert.TestingT) bool { return assert.EqualError(t, io.EOF, "EOF") },
		func(t assert.TestingT) bool { return assert.EqualError(t, io.EOF, "eof") }},
	{"EqualError/nil", func(t assert.TestingT) bool { return assert.EqualError(t, errors.New(""), "") },
		func(t assert.TestingT) bool { return assert.EqualError(t, nil, "") }},
	{"ErrorContains", func(t assert.TestingT) bool { return assert.ErrorContains(t, wrapped{io.EOF}, "d: E") },
		func(t assert.TestingT) bool { return assert.ErrorContains(t, io.EOF, "eof") }},
	{"ErrorContains/nil", func(t assert.TestingT) bool { return assert.ErrorContains(t, io.EOF, "") },
		func(t assert.TestingT) bool { return assert.ErrorContains(t, nil, "") }},
	{"ErrorIs", func(t assert.TestingT) bool {
		return assert.ErrorIs(t, fmt.Errorf("x: %w", wrapped{errSentinel}), errSentinel)
	},
		func(t assert.TestingT) bool { return assert.ErrorIs(t, wrapped{io.EOF}, errSentinel) }},
	{"ErrorIs/nil", func(t assert.TestingT) bool { return assert.ErrorIs(t, nil, nil) },
		func(t assert.TestingT) bool { return assert.ErrorIs(t, nil, errSentinel) }},
	{"ErrorIs/joined", func(t assert.TestingT) bool { return assert.ErrorIs(t, errors.Join(io.EOF, errSentinel), errSentinel) },
		func(t assert.TestingT) bool { return assert.ErrorIs(t, errors.Join(io.EOF), errSentinel) }},
	{"NotErrorIs", func(t assert.TestingT) bool { return assert.NotErrorIs(t, io.EOF, errSentinel) },
		func(t assert.TestingT) bool { return assert.NotErrorIs(t, wrapped{errSentinel}, errSentinel) }},
	{"ErrorAs", func(t assert.TestingT) bool {
		var w wrapped
		return assert.ErrorAs(t, fmt.Errorf("x: %w", wrapped{io.EOF}), &w) && w.err == io.EOF
	}, func(t assert.TestingT) bool { var pe *fs.PathError; return assert.ErrorAs(t, io.EOF, &pe) }},
	{"ErrorAs/nil", func(t assert.TestingT) bool { var e error; return assert.ErrorAs(t, io.EOF, &e) },
		func(t assert.TestingT) bool { var w wrapped; return assert.ErrorAs(t, nil, &w) }},
	{"Greater", func(t assert.TestingT) bool { return assert.Greater(t, 2, 1) },
		func(t assert.TestingT) bool { return assert.Greater(t, 1, 1) }},
	{"Greater/kinds", func(t assert.TestingT) bool { return assert.Greater(t, time.Second, time.Duration(1)) },
		func(t assert.TestingT) bool { return assert.Greater(t, 2, int64(1)) }},
	{"Greater/time", func(t assert.TestingT) bool { return assert.Greater(t, time.Unix(2, 0), time.Unix(1, 0)) },
		func(t assert.TestingT) bool { return assert.Greater(t, point{2, 0}, point{1, 0}) }},
	{"GreaterOrEqual", func(t assert.TestingT) bool { return assert.GreaterOrEqual(t, 1.5, 1.5) },
		func(t assert.TestingT) bool { return assert.GreaterOrEqual(t, uint8(1), uint8(2)) }},
	{"Less", func(t assert.TestingT) bool { return assert.Less(t, "a", "b") },
		func(t assert.TestingT) bool { return assert.Less(t, "b", "b") }},
	{"LessOrEqual", func(t assert.TestingT) bool { return assert.LessOrEqual(t, []byte("a"), []byte("a")) },
		func(t assert.TestingT) bool { return assert.LessOrEqual(t, int32(3), int32(2)) }},
	{"Positive", func(t assert.TestingT) bool { return assert.Positive(t, 0.5) },
		func(t assert.TestingT) bool { return assert.Positive(t, 0) }},
	{"Positive/negative", func(t assert.TestingT) bool { return assert.Positive(t, time.Nanosecond) },
		func(t assert.TestingT) bool { return assert.Positive(t, -1) }},
	{"InDelta", func(t assert.TestingT) bool { return assert.InDelta(t, 10, 10.5, 0.5) },
		func(t assert.TestingT) bool { return assert.InDelta(t, 10, 10.6, 0.5) }},
	{"InDelta/nan", func(t assert.TestingT) bool { return assert.InDelta(t, math.NaN(), math.NaN(), 0) },
		func(t assert.TestingT) bool { return assert.InDelta(t, 1, math.NaN(), 1) }},
	{"InDelta/nonnumber", func(t assert.TestingT) bool { return assert.InDelta(t, uint(3), int8(1), 2) },
		func(t assert.TestingT) bool { return assert.InDelta(t, "1", 1, 1) }},
	{"Panics", func(t assert.TestingT) bool { return assert.Panics(t, func() { panic("x") }) },
		func(t assert.TestingT) bool { return assert.Panics(t, func() {}) }},
	{"Panics/nil", func(t assert.TestingT) bool { return assert.Panics(t, func() { panic(nil) }) },
		func(t assert.TestingT) bool { return assert.Panics(t, func() { recover() }) }},
	{"NotPanics", func(t assert.TestingT) bool { return assert.NotPanics(t, func() {}) },
		func(t assert.TestingT) bool { return assert.NotPanics(t, func() { panic("x") }) }},
	{"PanicsWithValue", func(t assert.TestingT) bool { return assert.PanicsWithValue(t, "x", func() { panic("x") }) },
		func(t assert.TestingT) bool { return assert.PanicsWithValue(t, "x", func() { panic("y") }) }},
	{"PanicsWithValue/none", func(t assert.TestingT) bool { return assert.PanicsWithValue(t, io.EOF, func() { panic(io.EOF) }) },
		func(t assert.TestingT) bool { return assert.PanicsWithValue(t, "x", func() {}) }},
	{"Fail", func(t assert.TestingT) bool { return true },
		func(t assert.TestingT) bool { return assert.Fail(t, "failed") }},
	{"Failf", func(t assert.TestingT) bool { return true },
		func(t assert.TestingT) bool { return assert.Failf(t, "failed", "%d", 1) }},
	{"FailNow", func(t assert.TestingT) bool { return true },
		func(t assert.TestingT) bool { return assert.FailNow(t, "failed") }},
	{"Eventually", func(t assert.TestingT) bool {
		n := 0
		return assert.Eventually(t, func() bool { n++; return n == 3 }, time.Minute, time.Microsecond)
	}, func(t assert.TestingT) bool {
		return assert.Eventually(t, func() bool { return false }, time.Millisecond, time.Microsecond)
	}},
}

func TestChecksPassAndFail(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ok fakeT
			if !c.pass(&ok) {
				t.Errorf("the passing call returned false")
			}
			if len(ok.errors) != 0 {
				t.Errorf("the passing call reported %q", ok.errors)
			}
			var bad fakeT
			if c.fail(&bad) {
				t.Errorf("the failing call returned true")
			}
			if len(bad.errors) != 1 {
				t.Fatalf("the failing call reported %d errors, want 1: %q", len(bad.errors), bad.errors)
			}
			if bad.helpers == 0 {
				t.Errorf("the failing call did not call Helper")
			}
			if !strings.Contains(bad.errors[0], "Error:") {
				t.Errorf("the report has no Error label: %q", bad.errors[0])
			}
			want := 0
			if c.name == "FailNow" {
				want = 1
			}
			if bad.failNow != want {
				t.Errorf("FailNow called %d times, want %d", bad.failNow, want)
			}
		})
	}
}

func TestMessagesShowValuesAndMsgAndArgs(t *testing.T) {
	tests := []struct {
		name  string
		check func(assert.TestingT) bool
		want  []string
	}{
		{"values", func(t assert.TestingT) bool { return assert.Equal(t, point{1, 2}, point{2, 1}) },
			[]string{"Not equal", "expected: assert_test.point{X:1, Y:2}", "actual  : assert_test.point{X:2, Y:1}"}},
		{"types", func(t assert.TestingT) bool { return assert.Equal(t, 3, int64(3)) },
			[]string{"expected: int(3)", "actual  : int64(3)"}},
		{"durations", func(t assert.TestingT) bool { return assert.Equal(t, time.Second, time.Minute) },
			[]string{"expected: 1s", "actual  : 1m0s"}},
		{"one message", func(t assert.TestingT) bool { return assert.True(t, false, "the flag") },
			[]string{"Should be true", "Messages: \tthe flag"}},
		{"one value", func(t assert.TestingT) bool { return assert.True(t, false, point{1, 2}) },
			[]string{"Messages: \t{X:1 Y:2}"}},
		{"format", func(t assert.TestingT) bool { return assert.False(t, true, "node %q field %s", "a", "B") },
			[]string{`Messages: 	node "a" field B`}},
		{"no format", func(t assert.TestingT) bool { return assert.True(t, false, 1, 2) },
			[]string{"Messages: \t[1 2]"}},
		{"Failf", func(t assert.TestingT) bool { return assert.Failf(t, "order", "key %d", 7) },
			[]string{"Error:    \torder", "Messages: \tkey 7"}},
		{"error", func(t assert.TestingT) bool { return assert.NoError(t, wrapped{io.EOF}) },
			[]string{"Received unexpected error:", "wrapped: EOF"}},
		{"chain", func(t assert.TestingT) bool { return assert.ErrorIs(t, wrapped{io.EOF}, errSentinel) },
			[]string{`expected: "sentinel"`, `"wrapped: EOF" (assert_test.wrapped)`, `"EOF" (*errors.errorString)`}},
		{"len", func(t assert.TestingT) bool { return assert.Len(t, []int{1}, 2) },
			[]string{"should have 2 item(s), but has 1"}},
		{"panic", func(t assert.TestingT) bool { return assert.PanicsWithValue(t, "x", func() { panic("y") }) },
			[]string{`should panic with value:	"x"`, `Panic value:	"y"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fakeT
			tt.check(&f)
			if len(f.errors) != 1 {
				t.Fatalf("reported %d errors, want 1: %q", len(f.errors), f.errors)
			}
			for _, w := range tt.want {
				if !strings.Contains(f.errors[0], w) {
					t.Errorf("report %q lacks %q", f.errors[0], w)
				}
			}
		})
	}
}

func TestObjectsAreEqual(t *testing.T) {
	tests := []struct {
		a, b any
		want bool
	}{
		{nil, nil, true},
		{nil, 0, false},
		{[]byte(nil), []byte(nil), true},
		{[]byte{}, []byte(nil), false},
		{[]byte("x"), "x", false},
		{map[string][]int{"a": {1}}, map[string][]int{"a": {1}}, true},
		{1, 1.0, false},
		{&point{1, 2}, &point{1, 2}, true},
	}
	for _, tt := range tests {
		if got := assert.ObjectsAreEqual(tt.a, tt.b); got != tt.want {
			t.Errorf("ObjectsAreEqual(%#v, %#v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestWorksWithTestingT shows that *testing.T is a TestingT and that a
// passing check reports nothing to it.
func TestWorksWithTestingT(t *testing.T) {
	if !assert.Equal(t, 1, 1) || !assert.ErrorIs(t, wrapped{io.EOF}, io.EOF) {
		t.Fatal("a passing check returned false")
	}
}

// TestEveryFunctionHasACase keeps cases complete as functions are added.
func TestEveryFunctionHasACase(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, c := range cases {
		have[strings.Split(c.name, "/")[0]] = true
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() || fd.Name.Name == "ObjectsAreEqual" {
				continue
			}
			if !have[fd.Name.Name] {
				t.Errorf("%s has no case", fd.Name.Name)
			}
		}
	}
}
