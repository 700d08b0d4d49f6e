package main

import (
	"strconv"
	"strings"
	"unicode"
)

// reason is an error's text with the detail of one item stripped, so that
// the dead letters of one cause fall into one group: quoted text becomes
// "…", a word with a digit in it (an ID, an amount, a date, a count)
// becomes N, and runs of white space become one space. A three-digit
// number from 100 to 599 stays, as it is most likely a status code, which
// tells causes apart.
func reason(text string) string {
	var b strings.Builder
	rs := []rune(oneLine(text))
	for i := 0; i < len(rs); {
		r := rs[i]
		if r == '"' || r == '\'' || r == '`' {
			if end := closingQuote(rs, i); end > i {
				b.WriteRune(r)
				b.WriteRune('…')
				b.WriteRune(r)
				i = end + 1
				continue
			}
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
		word := string(rs[i:j])
		b.WriteString(stripWord(word))
		i = j
	}
	return b.String()
}

// closingQuote returns the index of the quote that closes the one at
// rs[i], skipping backslash escapes, or -1.
func closingQuote(rs []rune, i int) int {
	q := rs[i]
	if q == '\'' && i > 0 && isWordRune(rs[i-1]) {
		return -1 // an apostrophe: "can't"
	}
	for j := i + 1; j < len(rs); j++ {
		switch rs[j] {
		case '\\':
			j++
		case q:
			return j
		}
	}
	return -1
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.+/#@", r)
}

// stripWord returns N for a word with a digit in it, but keeps a likely
// status code; a trailing dot ends a sentence and stays.
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
	return "N" + trail
}
