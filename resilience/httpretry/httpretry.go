// Package httpretry turns the result of an HTTP call into the error a
// pipeline's retry layers understand, in one line:
//
//	resp, err := httpretry.Do(client, req)
//	if err != nil {
//		return zero, err // classified: the pipeline retries it or not
//	}
//	defer resp.Body.Close()
//
// [Do] sends the request and judges the result as [Check] does, which
// takes what a client returned: httpretry.Check(client.Do(req)). Do
// sees one thing more, the request's context (see below).
//
// A response of status 1xx to 3xx is returned as it is; the caller reads
// and closes its body. Any other ends as an error, its body read (a
// snippet is kept) and closed:
//
//   - 429 Too Many Requests and 503 Service Unavailable with a valid
//     Retry-After header: a [*StatusError] marked with
//     [resilience.RetryAfter], so that the retrying layer waits what the
//     server asked for (0 for a date in the past: retry at once). Without
//     the header, or with one that is malformed, they are transient with
//     no delay hint: the layer's own backoff applies.
//   - 408 Request Timeout, 425 Too Early and every other 5xx: a transient
//     [*StatusError].
//   - Every other 4xx: a [*StatusError] that is permanent for the default
//     classifier. A rule of your own decides otherwise (a 404 that a
//     replica will soon know, say):
//     resilience.TransientAs(c, func(e *httpretry.StatusError) bool { return e.Code == 404 }).
//
// An error of the call itself (no response) is judged by exclusion. A
// few are left to the classifier, which judges them permanent by
// default, since no retry fixes them: a URL that does not parse, a
// request that the client refuses to send (an unsupported scheme, no
// host, an invalid method or header), a redirect that the client's
// CheckRedirect refuses or whose Location does not parse, an HTTPS
// request answered in plain HTTP ([http.ErrSchemeMismatch]), and a
// certificate that does not verify (the server's, or the client's that
// the server refused). Every other is transient: the network failed, or
// the server or a proxy dropped the request, whatever the protocol calls
// it (a refused connection, a timeout, no such host, [io.EOF] over
// HTTP/1.1, a stream reset or a lost connection over HTTP/2).
//
// A call whose context ended is the context's doing. A context cancelled
// without a cause gives [context.Canceled], which stays what it is:
// permanent, never retried, and not the item's fault (see
// [resilience.IsBlameless]). A context cancelled with a cause
// ([context.WithCancelCause], an errgroup, [os/signal.NotifyContext])
// gives the cause alone, which Check cannot tell from a transport's
// error: it judges it as one (transient). Do asks the request's context
// and judges the same call as a cancellation, whatever the cause: its
// error matches context.Canceled as well, is permanent and blameless. A
// deadline that passed is transient for both; Do's error matches
// [context.DeadlineExceeded] even when the deadline had a cause.
//
// Errors never show a URL's user information, its fragment or its query
// values (nor the name of a query parameter without a value, as in
// "feed?s3cret"), which often hold credentials; a URL that the client
// quotes in an error's text (a Location that does not parse) loses its
// whole query there.
package httpretry

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/resilience"
)

// SnippetSize is how many bytes of an error response's body a
// [StatusError] keeps.
const SnippetSize = 512

// DrainLimit is how many bytes of an error response's body Check reads
// past the snippet before it closes the body: a body read to its end
// lets the client use its connection again; a longer one is cut off, and
// the connection with it.
const DrainLimit = 64 << 10

// ErrStatus is matched by every [*StatusError] with [errors.Is].
var ErrStatus = errors.New("httpretry: error status")

// A StatusError is a response whose status says the call failed (400 and
// above). Its StatusCode and Temporary methods tell the default
// classifier what to do with it: Temporary is true for 408, 425, 429 and
// 5xx.
type StatusError struct {
	// Code is the status code, such as 503.
	Code int
	// Status is the status line's text, such as "503 Service Unavailable".
	Status string
	// Method is the request's method.
	Method string
	// URL is the request's URL without its user information and
	// fragment, and with the value of every query parameter replaced by
	// "redacted" (a parameter without a value, its name too).
	URL string
	// Body holds the first SnippetSize bytes of the response's body, with
	// invalid UTF-8 replaced; empty for a response without a body.
	Body string
	// Truncated says that the body was longer than Body.
	Truncated bool
}

// Error names the request, the status and, when there is one, the start
// of the body.
func (e *StatusError) Error() string {
	msg := "httpretry: " + e.Status
	if e.Method != "" || e.URL != "" {
		msg = fmt.Sprintf("httpretry: %s %s: %s", e.Method, e.URL, e.Status)
	}
	if e.Body == "" {
		return msg
	}
	body := e.Body
	if e.Truncated {
		body += "..."
	}
	return fmt.Sprintf("%s: %q", msg, body)
}

// Is reports whether target is [ErrStatus].
func (e *StatusError) Is(target error) bool { return target == ErrStatus }

// StatusCode returns Code: the default classifier's way to see HTTP
// errors.
func (e *StatusError) StatusCode() int { return e.Code }

// Temporary reports whether another attempt may succeed: for 408 Request
// Timeout, 425 Too Early, 429 Too Many Requests and every 5xx.
func (e *StatusError) Temporary() bool {
	switch c := e.Code; {
	case c == http.StatusRequestTimeout, c == http.StatusTooEarly, c == http.StatusTooManyRequests:
		return true
	case c >= 500 && c <= 599:
		return true
	}
	return false
}

// A Checker turns HTTP results into classified errors. A zero Checker is
// ready to use; [Check] uses one.
type Checker struct {
	// Clock gives the time that a Retry-After date is measured from when
	// the response has no valid Date header; nil is the real clock. With
	// a Date header, Check measures from it: both times are the server's,
	// so a clock skew between the two machines does not count.
	Clock clockwork.Clock
}

// Check is [Checker.Check] of a zero Checker.
func Check(resp *http.Response, err error) (*http.Response, error) {
	return Checker{}.Check(resp, err)
}

// Do is [Checker.Do] of a zero Checker.
func Do(client *http.Client, req *http.Request) (*http.Response, error) {
	return Checker{}.Do(client, req)
}

// Do sends req with client (http.DefaultClient when nil) and returns
// what [Checker.Check] makes of the result, with one thing that Check
// cannot see: req's context. A call that failed once its context was
// cancelled, with a cause or without, ends with an error that matches
// context.Canceled, permanent and not the item's fault (see
// [resilience.IsBlameless]); one that failed once its deadline passed,
// with an error that matches context.DeadlineExceeded, transient. The
// error wraps what the client returned, the context's cause with it.
func (c Checker) Do(client *http.Client, req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errors.New("httpretry: nil request")
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			// (A response that comes with an error has its body
			// closed by the client already.)
			return nil, contextEnded(err, ctxErr)
		}
	}
	return c.Check(resp, err)
}

// Check returns resp when err is nil and resp's status is below 400: the
// caller reads and closes its body. Otherwise it returns a nil response
// and a classified error (see the package's doc), having read and closed
// the body of an error response; it reads at most SnippetSize +
// DrainLimit bytes of it.
func (c Checker) Check(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		// (A response that comes with an error has its body closed by
		// the client already.)
		return nil, callError(resp, err)
	}
	if resp == nil {
		return nil, errors.New("httpretry: no response and no error")
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	se := &StatusError{Code: resp.StatusCode, Status: resp.Status}
	if se.Status == "" {
		se.Status = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if req := resp.Request; req != nil {
		se.Method = req.Method
		if se.Method == "" {
			se.Method = http.MethodGet
		}
		if req.URL != nil {
			se.URL = redact(req.URL)
		}
	}
	se.Body, se.Truncated = drain(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return nil, se
	}
	var now time.Time
	if date, derr := http.ParseTime(resp.Header.Get("Date")); derr == nil {
		now = date
	} else if c.Clock != nil {
		now = c.Clock.Now()
	} else {
		now = time.Now()
	}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
		return nil, resilience.RetryAfter(se, d)
	}
	return nil, se
}

// ParseRetryAfter returns the delay a Retry-After header's value asks
// for (RFC 9110, section 10.2.3): a number of seconds, or an HTTP date,
// measured from now; 0 for a date that is past. It reports false for an
// empty or malformed value. A number of seconds too large for a
// time.Duration saturates; the retry layer's MaxDelay, when set, caps
// what it waits.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if value[0] >= '0' && value[0] <= '9' {
		// delay-seconds = 1*DIGIT: no sign, no fraction.
		for i := 0; i < len(value); i++ {
			if value[i] < '0' || value[i] > '9' {
				return 0, false
			}
		}
		secs, err := strconv.ParseUint(value, 10, 64)
		if err != nil || secs > uint64(math.MaxInt64/int64(time.Second)) {
			return math.MaxInt64, true // out of range: all digits, so huge
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// drain reads up to SnippetSize bytes of body as the snippet, then up to
// DrainLimit more, and closes it. It reports whether there was more than
// the snippet.
func drain(body io.ReadCloser) (snippet string, truncated bool) {
	if body == nil {
		return "", false
	}
	defer body.Close()
	buf := make([]byte, SnippetSize+1)
	n, _ := io.ReadFull(body, buf)
	truncated = n > SnippetSize
	if truncated {
		n = SnippetSize
		_, _ = io.CopyN(io.Discard, body, DrainLimit-1)
	}
	b := buf[:n]
	if truncated {
		// Do not keep half a rune that the cut split.
		for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), truncated
}
