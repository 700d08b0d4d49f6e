// Package reason makes an error's text short and deterministic, so that
// the failures of many items group by it: slogobserver's summaries and the
// inspector's dead-letter groups share it.
package reason

import (
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the most bytes a reason has, the "…" that marks a cut
// included.
const MaxLen = 200

// Status returns the StatusCode() of the first error in err's tree that
// has the method, as text, or "".
func Status(err error) string {
	var sc interface{ StatusCode() int }
	if errors.As(err, &sc) {
		return strconv.Itoa(sc.StatusCode())
	}
	return ""
}

// Of returns the reason of an error whose text is s and whose status
// (see Status) is status: slogobserver.Reason tells the rules.
func Of(s, status string) string {
	var b strings.Builder
	b.Grow(min(len(s), MaxLen))
	unclosed := false // a quote found no closing one: none after it will
	// The whole text is read, however long, until the reason is longer
	// than it may be: a quoted text of any length is "…" (a long row's),
	// and each byte is looked at a bounded number of times.
	for i := 0; i < len(s) && b.Len() <= MaxLen; {
		c := s[i]
		switch {
		case spaceAt(s, i) > 0:
			for n := spaceAt(s, i); n > 0; n = spaceAt(s, i) {
				i += n
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
			for j < len(s) && isWordByte(s[j]) && spaceAt(s, j) == 0 {
				digits = digits || '0' <= s[j] && s[j] <= '9'
				j++
			}
			for j > i+1 && s[j-1] == '.' {
				j-- // a full stop ends the sentence, not the word
			}
			switch w := s[i:j]; {
			case digits && w != status:
				b.WriteByte('#')
			default:
				// No more than the reason holds: a word of 32 MB
				// (a token, a blob) is not copied whole.
				b.WriteString(w[:min(len(w), MaxLen+1-b.Len())])
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	r := b.String()
	if len(r) <= MaxLen {
		return r
	}
	k := MaxLen - len("…")
	for k > 0 && !utf8.RuneStart(r[k]) {
		k--
	}
	return r[:k] + "…"
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// spaceAt returns the length in bytes of the white space character at
// s[i], or 0: an ASCII one, or a Unicode one (a no-break space, NEL, a
// line separator), which would otherwise be read as part of a word.
func spaceAt(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	c := s[i]
	if c < utf8.RuneSelf {
		if isSpace(c) {
			return 1
		}
		return 0
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if unicode.IsSpace(r) {
		return n
	}
	return 0
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
