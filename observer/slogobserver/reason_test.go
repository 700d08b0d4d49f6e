package slogobserver_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/resilience"
)

func TestReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ err, want string }{
		{"rates: HTTP 503", "rates: HTTP #"},
		{"etl: upsert order o-000123: database is locked", "etl: upsert order #: database is locked"},
		{`malformed row "o-7,c-12,12.5O,EUR,2026-03-01": amount: bad cents`, `malformed row "…": amount: bad cents`},
		{`rates: unknown currency "XAU"`, `rates: unknown currency "…"`},
		{`say "a \"quoted\" word" twice`, `say "…" twice`},
		{`a "closed" and an "unclosed quote`, `a "…" and an "unclosed quote`},
		{"order 7 has no lines", "order # has no lines"},
		{"row 1234: 5 fields, want 7", "row #: # fields, want #"},
		{"dial tcp 10.0.0.12:5432: connection refused", "dial tcp #:#: connection refused"},
		{"id 123e4567-e89b-12d3-a456-426614174000 unknown", "id # unknown"},
		{"timed out after 1.5s", "timed out after #"},
		{"status 404.", "status #."},
		{"x509: bad certificate", "#: bad certificate"},
		{"item_retry exhausted", "item_retry exhausted"},
		{"  two\n\tlines  \n", "two lines"},
		{"Größe 12345 ungültig", "Größe # ungültig"},
	} {
		assert.Equal(t, c.want, slogobserver.Reason(errors.New(c.err)), c.err)
	}
}

// statusError is an HTTP error, as the default classifier reads them.
type statusError struct{ code int }

func (e *statusError) Error() string   { return fmt.Sprintf("HTTP %d", e.code) }
func (e *statusError) StatusCode() int { return e.code }

func TestReasonKeepsTheStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{&statusError{503}, "HTTP 503"},
		{fmt.Errorf("price order 1234: %w", &statusError{400}), "price order #: HTTP 400"},
		{fmt.Errorf("retry 503 of %w", &statusError{404}), "retry # of HTTP 404"},
		{&resilience.RetryExhaustedError{Kind: resilience.ItemRetry, Attempts: 4, Err: &statusError{503}},
			"resilience: item_retry exhausted after # attempts: HTTP 503"},
	} {
		assert.Equal(t, c.want, slogobserver.Reason(c.err), c.err.Error())
	}
}

func TestReasonOfWrappedErrors(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "rates: dial: connection refused", slogobserver.Reason(fmt.Errorf("rates: dial: %w", syscall.ECONNREFUSED)))
	assert.Equal(t, "first second", slogobserver.Reason(errors.Join(errors.New("first"), errors.New("second"))))
	assert.Empty(t, slogobserver.Reason(nil))
}

func TestReasonIsCut(t *testing.T) {
	t.Parallel()
	long := slogobserver.Reason(errors.New(strings.Repeat("é", 1000)))
	assert.LessOrEqual(t, len(long), slogobserver.MaxReasonLen)
	assert.True(t, utf8.ValidString(long))
	assert.True(t, strings.HasSuffix(long, "é…"), long)
	assert.Equal(t, strings.Repeat("a", slogobserver.MaxReasonLen),
		slogobserver.Reason(errors.New(strings.Repeat("a", slogobserver.MaxReasonLen))), "a reason of the limit's length is whole")
	// Quotes and numbers shrink long texts before the cut.
	assert.Equal(t, `rows "…" "…" "…"`, slogobserver.Reason(errors.New(
		`rows "`+strings.Repeat("x", 300)+`" "`+strings.Repeat("y", 300)+`" "`+strings.Repeat("z", 300)+`"`)))
}

// A quoted text longer than any part of the error Reason once read (1 024
// bytes: a wide malformed row) is "…" too: cut, it looked unclosed, so the
// row's contents went into the reason, the rest of the error was lost, and
// each row had a reason of its own. An error of 10 MB has a reason too.
func TestReasonOfALongQuotedText(t *testing.T) {
	t.Parallel()
	a := errors.New(`malformed row "` + strings.Repeat("a,", 600) + `x1": amount: bad cents`)
	b := errors.New(`malformed row "` + strings.Repeat("b,", 5000) + `x2": amount: bad cents`)
	assert.Equal(t, `malformed row "…": amount: bad cents`, slogobserver.Reason(a))
	assert.Equal(t, slogobserver.Reason(a), slogobserver.Reason(b))
	huge := slogobserver.Reason(errors.New(`row "` + strings.Repeat("x", 10<<20)))
	assert.Equal(t, slogobserver.MaxReasonLen, len(huge), "an unclosed quote runs to the cut")
	assert.True(t, strings.HasPrefix(huge, `row "xxx`), huge[:20])
}

// White space outside ASCII (NEL, a no-break space, a line separator, an
// ideographic space) is white space too: it was read as part of a word,
// so "timeout\u00a0" grouped apart from "timeout" and a reason could hold
// a line separator (found by review, with FuzzReason).
func TestReasonOfUnicodeWhiteSpace(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"\u0085":                 "",
		"timeout\u00a0":          "timeout",
		"a\u2028\u2028b":         "a b",
		"\u3000x":                "x",
		"row\u00a07:\u00a0bad é": "row #: bad é",
	} {
		assert.Equal(t, want, slogobserver.Reason(errors.New(in)), "%q", in)
	}
}

func FuzzReason(f *testing.F) {
	f.Add(`malformed row "o-7,12.5O": amount 12345`)
	f.Add("\u0085")
	f.Add("\"\\\"\"\"")
	f.Fuzz(func(t *testing.T, s string) {
		r := slogobserver.Reason(errors.New(s))
		if len(r) > slogobserver.MaxReasonLen {
			t.Fatalf("reason of %q is %d bytes", s, len(r))
		}
		if utf8.ValidString(s) && !utf8.ValidString(r) {
			t.Fatalf("reason of %q is not UTF-8: %q", s, r)
		}
		if r != strings.TrimSpace(r) || strings.Contains(r, "  ") || strings.ContainsAny(r, "\n\t") {
			t.Fatalf("reason of %q has stray white space: %q", s, r)
		}
		if again := slogobserver.Reason(errors.New(s)); again != r {
			t.Fatalf("reason of %q is %q, then %q", s, r, again)
		}
	})
}
