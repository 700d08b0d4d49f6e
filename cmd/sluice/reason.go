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
		if end, dot, ok := groupedNumber(rs, i, j); ok {
			b.WriteByte('N')
			if dot {
				b.WriteByte('.')
			}
			i = end
			continue
		}
		b.WriteString(stripWord(string(rs[i:j])))
		i = j
	}
	return b.String()
}

// groupedNumber reports whether the word rs[i:j] begins a number written
// with thousands separators (1 000 000, 1,000,000, 12 500.75): one to three
// digits, then groups of three digits, each after one space or comma, the
// last of them with a decimal part or a sentence's dot (dot) or neither.
// end is where the number ends. Words that are all status codes (503 404)
// are no number.
func groupedNumber(rs []rune, i, j int) (end int, dot, ok bool) {
	if j-i > 3 || !allDigits(rs[i:j]) {
		return 0, false, false
	}
	status := isStatus(rs[i:j])
	end = j
	for end+4 <= len(rs) && (rs[end] == ' ' || rs[end] == ',') && allDigits(rs[end+1:end+4]) {
		w := end + 1
		for w < len(rs) && isWordRune(rs[w]) {
			w++
		}
		g := rs[end+1 : w]
		if len(g) > 3 && (g[3] != '.' || !allDigits(g[4:])) {
			break
		}
		status = status && len(g) == 3 && isStatus(g)
		dot = len(g) == 4
		end = w
	}
	if end == j || status {
		return 0, false, false
	}
	return end, dot, true
}

func allDigits(rs []rune) bool {
	for _, r := range rs {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// isStatus reports whether rs is a number from 100 to 599, likely a
// status code.
func isStatus(rs []rune) bool {
	n, err := strconv.Atoi(string(rs))
	return err == nil && len(rs) == 3 && n >= 100 && n <= 599
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
