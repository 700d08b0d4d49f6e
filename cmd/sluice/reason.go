package main

import (
	"strconv"
	"strings"
	"unicode"
)

// reason is an error's text with the detail of one item stripped, so that
// the dead letters of one cause fall into one group: quoted text becomes
// "…", a number becomes N (a three-digit number from 100 to 599 stays, as
// it is most likely a status code, which tells causes apart), the digits
// within a word become N (ord-0000123 is ord-N, v1 is vN), and runs of white
// space become one space. It reads the text once: its cost grows with the
// text's length, never faster.
func reason(text string) string {
	rs := []rune(oneLine(text))
	closing := closingQuotes(rs)
	var b strings.Builder
	for i := 0; i < len(rs); {
		r := rs[i]
		if end := closing[i]; end > i {
			b.WriteRune(r)
			b.WriteRune('…')
			b.WriteRune(r)
			i = end + 1
			continue
		}
		if !isWordRune(r) {
			b.WriteRune(r)
			i++
			continue
		}
		j := i
		for j < len(rs) && isWordRune(rs[j]) {
			j++
		}
		b.WriteString(stripWord(string(rs[i:j])))
		i = j
	}
	return b.String()
}

// closingQuotes returns, for each rune that opens a quote, the index of the
// quote that closes it (the next one of its kind that is not escaped),
// else -1. A quote is escaped when an odd number of backslashes comes
// before it (\\" is an escaped backslash and a real quote); an escaped
// quote neither opens nor closes, and an apostrophe inside a word ("can't")
// opens nothing. One pass from the end: no quote is searched for twice.
func closingQuotes(rs []rune) []int {
	closing := make([]int, len(rs))
	escaped := make([]bool, len(rs))
	backslashes := 0
	for i, r := range rs {
		escaped[i] = backslashes%2 == 1
		if r == '\\' {
			backslashes++
		} else {
			backslashes = 0
		}
	}
	next := map[rune]int{'"': -1, '\'': -1, '`': -1}
	for i := len(rs) - 1; i >= 0; i-- {
		closing[i] = -1
		r := rs[i]
		if _, ok := next[r]; !ok || escaped[i] {
			continue
		}
		if !(r == '\'' && i > 0 && isWordRune(rs[i-1])) {
			closing[i] = next[r]
		}
		next[r] = i
	}
	return closing
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.+#@", r)
}

// stripWord returns N for a number, keeping a likely status code, and the
// word with each run of digits as N otherwise; a trailing dot ends a
// sentence and stays.
func stripWord(w string) string {
	trail := ""
	if strings.HasSuffix(w, ".") {
		w, trail = strings.TrimSuffix(w, "."), "."
	}
	if !strings.ContainsFunc(w, unicode.IsDigit) {
		return w + trail
	}
	if n, err := strconv.Atoi(w); err == nil && len(w) == 3 && n >= 100 && n <= 599 {
		return w + trail
	}
	var b strings.Builder
	inDigits := false
	for _, r := range w {
		switch {
		case unicode.IsDigit(r):
			if !inDigits {
				b.WriteByte('N')
			}
			inDigits = true
		case inDigits && (r == '.' || r == ','):
			// 12.50: one number
		default:
			inDigits = false
			b.WriteRune(r)
		}
	}
	return b.String() + trail
}
