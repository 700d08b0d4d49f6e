package slogobserver

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxReasonLen is the most bytes a reason has, the "…" that marks a cut
// included.
const MaxReasonLen = 200

// Reason returns the short form of err's text that an [Observer] groups
// per-item events by. It is deterministic and depends on the text only:
//
//   - text in double quotes, as %q writes it (backslash escapes included),
//     becomes "…";
//   - a word (a run of letters, digits, '_', '-' and '.', without its
//     trailing dots) that holds a digit becomes #: ids, row numbers,
//     amounts, times and addresses go. The one number kept is the error's
//     status: the StatusCode() int of the first error in err's tree that
//     has that method (the interface the default classifier reads), so
//     that an HTTP 400 and an HTTP 503 stay apart;
//   - every run of white space, new lines included, becomes one space,
//     and the text is trimmed;
//   - the result is cut to [MaxReasonLen] bytes, on a character boundary,
//     ending with "…".
//
// So `row 17: order o-000123: HTTP 503` and `row 18: order o-000124:
// HTTP 503` share the reason `row #: order #: HTTP 503` when 503 is the
// status of the error, and `malformed row "o-7,12.5O,EUR": amount` becomes
// `malformed row "…": amount`. A nil err has the reason "".
func Reason(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	status := ""
	var sc interface{ StatusCode() int }
	if errors.As(err, &sc) {
		status = strconv.Itoa(sc.StatusCode())
	}
	var b strings.Builder
	b.Grow(min(len(s), MaxReasonLen))
	unclosed := false // a quote found no closing one: none after it will
	// The whole text is read, however long, until the reason is longer
	// than it may be: a quoted text of any length is "…" (a long row's),
	// and each byte is looked at a bounded number of times.
	for i := 0; i < len(s) && b.Len() <= MaxReasonLen; {
		c := s[i]
		switch {
		case isSpace(c):
			for i < len(s) && isSpace(s[i]) {
				i++
			}
			if b.Len() > 0 && i < len(s) {
				b.WriteByte(' ')
			}
		case c == '"' && !unclosed:
			if j := closingQuote(s, i+1); j >= 0 {
				b.WriteString(`"…"`)
				i = j + 1
			} else {
				unclosed = true
				b.WriteByte(c)
				i++
			}
		case isWordByte(c):
			j, digits := i, false
			for j < len(s) && isWordByte(s[j]) {
				digits = digits || '0' <= s[j] && s[j] <= '9'
				j++
			}
			for j > i+1 && s[j-1] == '.' {
				j-- // a full stop ends the sentence, not the word
			}
			if digits && s[i:j] != status {
				b.WriteByte('#')
			} else {
				b.WriteString(s[i:j])
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	r := b.String()
	if len(r) <= MaxReasonLen {
		return r
	}
	k := MaxReasonLen - len("…")
	for k > 0 && !utf8.RuneStart(r[k]) {
		k--
	}
	return r[:k] + "…"
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// isWordByte reports whether c belongs to a word. Every byte of a non-ASCII
// character does, so that words are never cut inside a character.
func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c >= utf8.RuneSelf
}

// closingQuote returns the index of the double quote that closes a quoted
// text starting at i, skipping backslash escapes, or -1.
func closingQuote(s string, i int) int {
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
