package require_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/require"
)

// fakeT records what a check reports and whether it stopped the test.
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

// cases lists, per function, a call that must pass and one that must
// fail; every function of the package has one (TestEveryFunctionHasACase).
var cases = map[string]struct{ pass, fail func(require.TestingT) }{
	"Contains":      {func(t require.TestingT) { require.Contains(t, "abc", "b") }, func(t require.TestingT) { require.Contains(t, "abc", "d") }},
	"ElementsMatch": {func(t require.TestingT) { require.ElementsMatch(t, []int{1, 2}, []int{2, 1}) }, func(t require.TestingT) { require.ElementsMatch(t, []int{1}, []int{2}) }},
	"Empty":         {func(t require.TestingT) { require.Empty(t, "") }, func(t require.TestingT) { require.Empty(t, "x") }},
	"Equal":         {func(t require.TestingT) { require.Equal(t, point{1, 2}, point{1, 2}) }, func(t require.TestingT) { require.Equal(t, point{1, 2}, point{2, 1}) }},
	"EqualError":    {func(t require.TestingT) { require.EqualError(t, io.EOF, "EOF") }, func(t require.TestingT) { require.EqualError(t, io.EOF, "x") }},
	"Error":         {func(t require.TestingT) { require.Error(t, io.EOF) }, func(t require.TestingT) { require.Error(t, nil) }},
	"ErrorAs": {func(t require.TestingT) { var e error; require.ErrorAs(t, io.EOF, &e) }, func(t require.TestingT) {
		var p *point
		_ = p
		var e interface{ Timeout() bool }
		require.ErrorAs(t, io.EOF, &e)
	}},
	"ErrorContains": {func(t require.TestingT) { require.ErrorContains(t, io.EOF, "O") }, func(t require.TestingT) { require.ErrorContains(t, io.EOF, "x") }},
	"ErrorIs":       {func(t require.TestingT) { require.ErrorIs(t, fmt.Errorf("w: %w", io.EOF), io.EOF) }, func(t require.TestingT) { require.ErrorIs(t, io.ErrUnexpectedEOF, io.EOF) }},
	"Eventually": {func(t require.TestingT) {
		require.Eventually(t, func() bool { return true }, time.Minute, time.Millisecond)
	}, func(t require.TestingT) {
		require.Eventually(t, func() bool { return false }, time.Millisecond, time.Microsecond)
	}},
	"Fail":           {func(require.TestingT) {}, func(t require.TestingT) { require.Fail(t, "x") }},
	"FailNow":        {func(require.TestingT) {}, func(t require.TestingT) { require.FailNow(t, "x", "y %d", 1) }},
	"Failf":          {func(require.TestingT) {}, func(t require.TestingT) { require.Failf(t, "x", "y %d", 1) }},
	"False":          {func(t require.TestingT) { require.False(t, false) }, func(t require.TestingT) { require.False(t, true) }},
	"Greater":        {func(t require.TestingT) { require.Greater(t, 2, 1) }, func(t require.TestingT) { require.Greater(t, 1, 2) }},
	"GreaterOrEqual": {func(t require.TestingT) { require.GreaterOrEqual(t, 2, 2) }, func(t require.TestingT) { require.GreaterOrEqual(t, 1, 2) }},
	"InDelta":        {func(t require.TestingT) { require.InDelta(t, 1, 1.1, 0.2) }, func(t require.TestingT) { require.InDelta(t, 1, 2, 0.5) }},
	"JSONEq":         {func(t require.TestingT) { require.JSONEq(t, `{"a":1}`, `{"a": 1}`) }, func(t require.TestingT) { require.JSONEq(t, `{"a":1}`, `{"a":0}`) }},
	"Len":            {func(t require.TestingT) { require.Len(t, []int{1}, 1) }, func(t require.TestingT) { require.Len(t, []int{1}, 0) }},
	"Less":           {func(t require.TestingT) { require.Less(t, 1, 2) }, func(t require.TestingT) { require.Less(t, 2, 2) }},
	"LessOrEqual":    {func(t require.TestingT) { require.LessOrEqual(t, 2, 2) }, func(t require.TestingT) { require.LessOrEqual(t, 3, 2) }},
	"Nil":            {func(t require.TestingT) { require.Nil(t, nil) }, func(t require.TestingT) { require.Nil(t, 1) }},
	"NoError":        {func(t require.TestingT) { require.NoError(t, nil) }, func(t require.TestingT) { require.NoError(t, io.EOF) }},
	"NotContains":    {func(t require.TestingT) { require.NotContains(t, []int{1}, 2) }, func(t require.TestingT) { require.NotContains(t, []int{1}, 1) }},
	"NotEmpty":       {func(t require.TestingT) { require.NotEmpty(t, []int{1}) }, func(t require.TestingT) { require.NotEmpty(t, []int{}) }},
	"NotEqual":       {func(t require.TestingT) { require.NotEqual(t, 1, 2) }, func(t require.TestingT) { require.NotEqual(t, 1, 1) }},
	"NotErrorIs":     {func(t require.TestingT) { require.NotErrorIs(t, io.EOF, io.ErrClosedPipe) }, func(t require.TestingT) { require.NotErrorIs(t, io.EOF, io.EOF) }},
	"NotNil":         {func(t require.TestingT) { require.NotNil(t, 1) }, func(t require.TestingT) { require.NotNil(t, nil) }},
	"NotPanics":      {func(t require.TestingT) { require.NotPanics(t, func() {}) }, func(t require.TestingT) { require.NotPanics(t, func() { panic(1) }) }},
	"NotZero":        {func(t require.TestingT) { require.NotZero(t, 1) }, func(t require.TestingT) { require.NotZero(t, 0) }},
	"Panics":         {func(t require.TestingT) { require.Panics(t, func() { panic(1) }) }, func(t require.TestingT) { require.Panics(t, func() {}) }},
	"PanicsWithValue": {func(t require.TestingT) { require.PanicsWithValue(t, 1, func() { panic(1) }) },
		func(t require.TestingT) { require.PanicsWithValue(t, 1, func() { panic(2) }) }},
	"Positive": {func(t require.TestingT) { require.Positive(t, 1) }, func(t require.TestingT) { require.Positive(t, 0) }},
	"Regexp":   {func(t require.TestingT) { require.Regexp(t, "^a", "ab") }, func(t require.TestingT) { require.Regexp(t, "^b", "ab") }},
	"Same":     {func(t require.TestingT) { p := &point{}; require.Same(t, p, p) }, func(t require.TestingT) { require.Same(t, &point{}, &point{}) }},
	"True":     {func(t require.TestingT) { require.True(t, true) }, func(t require.TestingT) { require.True(t, false) }},
	"Truef":    {func(t require.TestingT) { require.Truef(t, true, "%d", 1) }, func(t require.TestingT) { require.Truef(t, false, "%d", 1) }},
	"Zero":     {func(t require.TestingT) { require.Zero(t, 0) }, func(t require.TestingT) { require.Zero(t, 1) }},
}

func TestChecksStopOnlyWhenTheyFail(t *testing.T) {
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var ok fakeT
			c.pass(&ok)
			if len(ok.errors) != 0 || ok.failNow != 0 {
				t.Errorf("the passing call reported %q and called FailNow %d times", ok.errors, ok.failNow)
			}
			var bad fakeT
			c.fail(&bad)
			if len(bad.errors) != 1 {
				t.Errorf("the failing call reported %d errors, want 1: %q", len(bad.errors), bad.errors)
			}
			if bad.failNow != 1 {
				t.Errorf("the failing call called FailNow %d times, want 1", bad.failNow)
			}
			if bad.helpers == 0 {
				t.Errorf("the failing call did not call Helper")
			}
		})
	}
}

// TestEveryFunctionHasACase keeps cases complete as functions are added.
func TestEveryFunctionHasACase(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(filepath.Dir(file), "require.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !ast.IsExported(fd.Name.Name) {
			continue
		}
		n++
		if _, ok := cases[fd.Name.Name]; !ok {
			t.Errorf("%s has no case", fd.Name.Name)
		}
	}
	if n != len(cases) {
		t.Errorf("require.go has %d functions, cases %d", n, len(cases))
	}
}

// TestStopsARealTest shows that a failing check ends the goroutine of a
// *testing.T (through FailNow) before the next line runs.
func TestStopsARealTest(t *testing.T) {
	reached := make(chan bool, 1)
	var inner fakeT
	done := make(chan struct{})
	go func() {
		defer close(done)
		ft := &stopT{fakeT: &inner}
		require.Equal(ft, 1, 2)
		reached <- true
	}()
	<-done
	select {
	case <-reached:
		t.Fatal("the line after a failed require ran")
	default:
	}
	if !strings.Contains(strings.Join(inner.errors, ""), "Not equal") {
		t.Errorf("report: %q", inner.errors)
	}
}

// stopT stops its goroutine in FailNow as testing.T does.
type stopT struct{ *fakeT }

func (s *stopT) FailNow() { s.fakeT.FailNow(); runtime.Goexit() }
