package httpretry

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// redact returns u without its user information and fragment, and with
// its query redacted (see redactQuery).
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	c.Fragment, c.RawFragment = "", ""
	if c.RawQuery != "" {
		c.RawQuery = redactQuery(c.RawQuery)
	}
	return c.String()
}

// redactQuery replaces the value of each parameter of a query with
// "redacted", and a parameter with no value (a bare token, as in
// "feed?s3cret") or no name whole; a query that does not parse is
// replaced whole. It keeps the parameters' order.
func redactQuery(raw string) string {
	if _, err := url.ParseQuery(raw); err != nil {
		return "redacted"
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		if k == "" || v == "" {
			parts[i] = "redacted"
			continue
		}
		parts[i] = k + "=redacted"
	}
	return strings.Join(parts, "&")
}

// redactRawURL redacts raw as redact does when it parses, and else cuts
// its fragment, user information and query as text.
func redactRawURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return redact(u)
	}
	return scrubText(raw)
}

// redactCall returns err, the error of a call, with its url.Error's URL
// redacted, and with no query or user information left in its text.
func redactCall(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && err == error(ue) {
		c := *ue
		c.URL = redactRawURL(ue.URL)
		if c.Err != nil {
			c.Err = scrub(c.Err)
		}
		return &c
	}
	return scrub(err)
}

var (
	// query is a URL's query in a text: from "?" to the next space or
	// quote.
	query = regexp.MustCompile(`\?[^\s"'` + "`" + `<>]+`)
	// userInfo is a URL's user information in a text: from "//" to
	// "@", within the authority.
	userInfo = regexp.MustCompile(`//[^/?#\s"'` + "`" + `<>@]*@`)
	// fragment is a URL's fragment in a text, which redact drops too.
	fragment = regexp.MustCompile(`#[^\s"'` + "`" + `<>]+`)
)

// scrubText replaces every query in text with "?redacted", and drops
// user information and fragments.
func scrubText(text string) string {
	text = userInfo.ReplaceAllLiteralString(text, "//")
	text = fragment.ReplaceAllLiteralString(text, "")
	return query.ReplaceAllLiteralString(text, "?redacted")
}

// scrub returns err, or, when its text shows a query or user
// information (a Location that did not parse, quoted by the client), an
// error whose text does not, which wraps err.
func scrub(err error) error {
	text := err.Error()
	if clean := scrubText(text); clean != text {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}

// A scrubbedError shows the text of the error it wraps without the
// queries and user information it held. errors.Is and errors.As see
// what it wraps; so do Timeout and Temporary, which a url.Error asks its
// Err directly.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

func (e *scrubbedError) Timeout() bool {
	t, ok := e.err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

func (e *scrubbedError) Temporary() bool {
	t, ok := e.err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}
