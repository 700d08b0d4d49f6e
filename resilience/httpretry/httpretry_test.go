package httpretry_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/resilience/httpretry"
)

// A reply is what the test server answers.
type reply struct {
	code    int
	header  map[string]string // "" removes the header (Date, say)
	body    string
	bodyLen int // a body of this many 'x' instead
}

// server starts a test server that answers every request with r, and a
// client whose transport records what happens to each response's body.
func server(t *testing.T, r reply, before ...func(*httptest.Server)) (*httptest.Server, *http.Client, *bodies) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range r.header {
			if v == "" {
				w.Header()[k] = nil
				continue
			}
			w.Header().Set(k, v)
		}
		w.WriteHeader(r.code)
		if r.bodyLen > 0 {
			_, _ = w.Write([]byte(strings.Repeat("x", r.bodyLen)))
		}
		_, _ = io.WriteString(w, r.body)
	}))
	for _, f := range before {
		f(srv)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	b := &bodies{}
	c := srv.Client()
	c.Transport = &tracking{next: c.Transport, b: b}
	return srv, c, b
}

// bodies records the responses' bodies: bytes read from them, and
// whether each was closed.
type bodies struct {
	mu   sync.Mutex
	all  []*tracked
	read atomic.Int64
}

func (b *bodies) closed() (n int, all bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.all {
		if t.closed.Load() {
			n++
		}
	}
	return n, n == len(b.all)
}

type tracked struct {
	io.ReadCloser
	b      *bodies
	closed atomic.Bool
}

func (t *tracked) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.b.read.Add(int64(n))
	return n, err
}

func (t *tracked) Close() error {
	t.closed.Store(true)
	return t.ReadCloser.Close()
}

type tracking struct {
	next http.RoundTripper
	b    *bodies
}

func (rt *tracking) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		tb := &tracked{ReadCloser: resp.Body, b: rt.b}
		rt.b.mu.Lock()
		rt.b.all = append(rt.b.all, tb)
		rt.b.mu.Unlock()
		resp.Body = tb
	}
	return resp, err
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	return httpretry.Check(c.Do(req))
}

// Each status class gets its decision: below 400 the response itself;
// 408, 425, 429 and 5xx transient; every other 4xx permanent. Every error
// response's body is closed, a success's is left to the caller.
func TestStatusClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code      int
		transient bool
	}{
		{400, false}, {401, false}, {403, false}, {404, false}, {409, false}, {410, false}, {422, false}, {451, false}, {499, false},
		{408, true}, {425, true}, {429, true},
		{500, true}, {501, true}, {502, true}, {503, true}, {504, true}, {599, true},
	} {
		t.Run(strconv.Itoa(c.code), func(t *testing.T) {
			t.Parallel()
			srv, client, b := server(t, reply{code: c.code, body: "nope"})
			resp, err := get(t, client, srv.URL+"/rates")
			require.Nil(t, resp)
			require.ErrorIs(t, err, httpretry.ErrStatus)
			var se *httpretry.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, c.code, se.Code)
			assert.Equal(t, c.code, se.StatusCode())
			assert.Equal(t, http.MethodGet, se.Method)
			assert.Equal(t, srv.URL+"/rates", se.URL)
			assert.Equal(t, "nope", se.Body)
			assert.False(t, se.Truncated)
			assert.Equal(t, c.transient, resilience.IsTransient(err))
			assert.Equal(t, c.transient, se.Temporary())
			_, hint := resilience.RetryAfterOf(err)
			assert.False(t, hint, "no Retry-After, no hint")
			_, all := b.closed()
			assert.True(t, all, "the body is closed")
		})
	}
	for _, code := range []int{200, 201, 204, 301, 304} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			h := map[string]string{}
			if code == 301 {
				h["Location"] = "/elsewhere" // not followed: see CheckRedirect below
			}
			srv, client, b := server(t, reply{code: code, header: h, body: "fine"})
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := get(t, client, srv.URL)
			require.NoError(t, err)
			require.NotNil(t, resp)
			assert.Equal(t, code, resp.StatusCode)
			n, _ := b.closed()
			assert.Equal(t, 0, n, "a success's body is the caller's")
			require.NoError(t, resp.Body.Close())
		})
	}
}

// Retry-After on a 429 or a 503 becomes the retry's delay: seconds, or
// a date measured from the response's Date; a date in the past is 0
// (retry at once); a malformed value, or none, leaves the layer's own
// backoff (transient, no hint). On another status it is ignored.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	date := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return date.Add(d).Format(http.TimeFormat) }
	for _, c := range []struct {
		name     string
		code     int
		retry    string
		want     time.Duration
		hint     bool
		noDate   bool
		transent bool
	}{
		{name: "seconds 429", code: 429, retry: "7", want: 7 * time.Second, hint: true},
		{name: "seconds 503", code: 503, retry: "120", want: 2 * time.Minute, hint: true},
		{name: "zero", code: 503, retry: "0", want: 0, hint: true},
		{name: "spaces", code: 429, retry: " 3 ", want: 3 * time.Second, hint: true},
		{name: "date", code: 503, retry: at(90 * time.Second), want: 90 * time.Second, hint: true},
		{name: "date 429", code: 429, retry: at(time.Hour), want: time.Hour, hint: true},
		{name: "past date", code: 503, retry: at(-time.Hour), want: 0, hint: true},
		{name: "date without Date header", code: 503, retry: at(30 * time.Second), want: 30 * time.Second, hint: true, noDate: true},
		{name: "malformed word", code: 503, retry: "soon"},
		{name: "malformed negative", code: 429, retry: "-5"},
		{name: "malformed fraction", code: 429, retry: "1.5"},
		{name: "malformed date", code: 503, retry: "Sun, 31 Feb 2026 25:00:00 GMT"},
		{name: "absent", code: 503},
		{name: "ignored on 500", code: 500, retry: "7"},
		{name: "ignored on 502", code: 502, retry: "7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := map[string]string{"Date": date.Format(http.TimeFormat)}
			if c.noDate {
				h["Date"] = ""
			}
			if c.retry != "" {
				h["Retry-After"] = c.retry
			}
			srv, client, b := server(t, reply{code: c.code, header: h})
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			require.NoError(t, err)
			// Without a Date header, the checker's clock says when now is.
			checker := httpretry.Checker{Clock: clockwork.NewFakeClockAt(date)}
			resp, err := checker.Check(client.Do(req))
			require.Nil(t, resp)
			require.ErrorIs(t, err, httpretry.ErrStatus)
			assert.True(t, resilience.IsTransient(err))
			d, hint := resilience.RetryAfterOf(err)
			assert.Equal(t, c.hint, hint)
			assert.Equal(t, c.want, d)
			_, all := b.closed()
			assert.True(t, all)
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 0, 0, time.UTC)
	for _, c := range []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"0", 0, true},
		{"42", 42 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"Sun, 06 Nov 1994 08:49:37 GMT", 37 * time.Second, true},   // IMF-fixdate
		{"Sunday, 06-Nov-94 08:49:37 GMT", 37 * time.Second, true},  // obsolete RFC 850
		{"Sun Nov  6 08:49:37 1994", 37 * time.Second, true},        // obsolete asctime
		{"Sun, 06 Nov 1994 08:48:00 GMT", 0, true},                  // past
		{"99999999999999999999999", time.Duration(1<<63 - 1), true}, // saturates
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", time.Duration(1<<63 - 1), true},
		{"", 0, false},
		{"   ", 0, false},
		{"+5", 0, false},
		{"-5", 0, false},
		{"5s", 0, false},
		{"1e3", 0, false},
		{"tomorrow", 0, false},
	} {
		got, ok := httpretry.ParseRetryAfter(c.value, now)
		assert.Equal(t, c.ok, ok, "%q", c.value)
		assert.Equal(t, c.want, got, "%q", c.value)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Sun, 06 Nov 1994 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "-1", "1.5", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := httpretry.ParseRetryAfter(s, now)
		if d < 0 {
			t.Fatalf("%q: negative delay %v", s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("%q: a delay %v for a malformed value", s, d)
		}
	})
}

// A response without a body (a HEAD, a 503 with no content) gives an
// error with no body part.
func TestNoBody(t *testing.T) {
	t.Parallel()
	srv, client, b := server(t, reply{code: 503})
	_, err := get(t, client, srv.URL+"/x")
	var se *httpretry.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "", se.Body)
	assert.Equal(t, "httpretry: GET "+srv.URL+"/x: 503 Service Unavailable", err.Error())

	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, srv.URL, nil)
	require.NoError(t, err)
	_, err = httpretry.Check(client.Do(req))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.MethodHead, se.Method)
	assert.Equal(t, "", se.Body)
	_, all := b.closed()
	assert.True(t, all)

	// A response built by hand, with no Body at all.
	_, err = httpretry.Check(&http.Response{StatusCode: 404}, nil)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "404 Not Found", se.Status)
	assert.Equal(t, "httpretry: 404 Not Found", err.Error())
	assert.False(t, resilience.IsTransient(err))

	_, err = httpretry.Check(nil, nil)
	require.Error(t, err)
	assert.Equal(t, "httpretry: no response and no error", err.Error())
}

// A body larger than the snippet is cut (never inside a rune), read to
// its end when it is not too long, so that the client reuses its
// connection, and closed.
func TestBodyLargerThanTheSnippet(t *testing.T) {
	t.Parallel()
	// 511 bytes, then a 2-byte rune across the cut at 512.
	body := strings.Repeat("a", httpretry.SnippetSize-1) + "é" + strings.Repeat("z", 10_000)
	var conns atomic.Int64
	srv, client, b := server(t, reply{code: 500, body: body}, func(srv *httptest.Server) {
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
	})
	for range 3 {
		_, err := get(t, client, srv.URL)
		var se *httpretry.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, strings.Repeat("a", httpretry.SnippetSize-1), se.Body, "the half rune is dropped")
		assert.True(t, se.Truncated)
		assert.True(t, strings.HasSuffix(err.Error(), `aaa..."`), err.Error())
	}
	assert.Equal(t, int64(3*len(body)), b.read.Load(), "each body read to its end")
	assert.Equal(t, int64(1), conns.Load(), "one connection for the three calls")
	n, all := b.closed()
	assert.Equal(t, 3, n)
	assert.True(t, all)
}

// A body longer than SnippetSize + DrainLimit is not read to its end.
func TestHugeBodyIsCutOff(t *testing.T) {
	t.Parallel()
	srv, client, b := server(t, reply{code: 502, bodyLen: 4 << 20})
	_, err := get(t, client, srv.URL)
	var se *httpretry.StatusError
	require.ErrorAs(t, err, &se)
	assert.Len(t, se.Body, httpretry.SnippetSize)
	assert.True(t, se.Truncated)
	assert.LessOrEqual(t, b.read.Load(), int64(httpretry.SnippetSize+httpretry.DrainLimit))
	_, all := b.closed()
	assert.True(t, all)
}

// Invalid UTF-8 in a body does not reach the error's text as such.
func TestBodyInvalidUTF8(t *testing.T) {
	t.Parallel()
	srv, client, _ := server(t, reply{code: 400, body: "bad \xff\xfe input"})
	_, err := get(t, client, srv.URL)
	var se *httpretry.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "bad \uFFFD input", se.Body)
}

// The URL in errors loses its user information, fragment and query
// values, in a status error as in a network error.
func TestURLRedacted(t *testing.T) {
	t.Parallel()
	srv, client, _ := server(t, reply{code: 403})
	u := strings.Replace(srv.URL, "http://", "http://alice:s3cret@", 1) + "/rates?apikey=s3cret&base=EUR#top"
	_, err := get(t, client, u)
	var se *httpretry.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, srv.URL+"/rates?apikey=redacted&base=redacted", se.URL)
	assert.NotContains(t, err.Error(), "s3cret")
	assert.NotContains(t, err.Error(), "alice")

	srv.Close()
	_, err = get(t, client, u)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret")
	assert.NotContains(t, err.Error(), "alice")
	assert.Contains(t, err.Error(), "apikey=redacted")
}

// A network error is transient: a refused connection, a connection that
// the server drops before answering, a client timeout.
func TestNetworkErrors(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		srv, client, _ := server(t, reply{code: 200})
		srv.Close()
		resp, err := get(t, client, srv.URL)
		require.Nil(t, resp)
		require.Error(t, err)
		assert.NotErrorIs(t, err, httpretry.ErrStatus)
		assert.True(t, resilience.IsTransient(err), "%v", err)
		assert.False(t, resilience.IsBlameless(err))
	})
	t.Run("dropped", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		defer srv.Close()
		_, err := get(t, srv.Client(), srv.URL)
		require.Error(t, err)
		assert.ErrorIs(t, err, io.EOF)
		assert.True(t, resilience.IsTransient(err), "%v", err)
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		ctx, cancel := context.WithDeadline(t.Context(), time.Now()) // already past: no waiting
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		_, err = httpretry.Check(srv.Client().Do(req))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.True(t, resilience.IsTransient(err), "a deadline of the caller's own")
	})
	t.Run("no such host", func(t *testing.T) {
		t.Parallel()
		// The resolver's answer, without asking one: a test must not
		// depend on the machine's DNS.
		client := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "rates.invalid", IsNotFound: true}}
		}}}
		_, err := get(t, client, "http://rates.invalid/")
		var dns *net.DNSError
		require.ErrorAs(t, err, &dns)
		assert.True(t, resilience.IsTransient(err), "%v", err)
	})
	t.Run("certificate", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake's failure is expected
		srv.StartTLS()
		defer srv.Close()
		_, err := get(t, http.DefaultClient, srv.URL) // a client that does not trust the test certificate
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, err, &unknown)
		assert.False(t, resilience.IsTransient(err), "no retry makes a certificate trusted: %v", err)
	})
	t.Run("bad scheme", func(t *testing.T) {
		t.Parallel()
		_, err := get(t, http.DefaultClient, "gopher://example.com/")
		require.Error(t, err)
		assert.False(t, resilience.IsTransient(err), "no retry fixes a URL: %v", err)
	})
}

// A call whose context was cancelled is neither retried nor the item's
// fault: the error stays a cancellation.
func TestCancelledIsBlameless(t *testing.T) {
	t.Parallel()
	srv, client, _ := server(t, reply{code: 200})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/?token=abc", nil)
	require.NoError(t, err)
	resp, err := httpretry.Check(client.Do(req))
	require.Nil(t, resp)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, resilience.IsTransient(err))
	assert.True(t, resilience.IsBlameless(err))
	assert.NotContains(t, err.Error(), "abc")
}

// A user rule can make a permanent status transient, and the other way
// round: the decision is carried by the error's type, not by marks.
func TestRulesOverride(t *testing.T) {
	t.Parallel()
	srv, client, _ := server(t, reply{code: 404})
	_, err := get(t, client, srv.URL)
	c := resilience.TransientAs(resilience.Classifier{}, func(e *httpretry.StatusError) bool { return e.Code == 404 })
	assert.True(t, c.IsTransient(err))
	assert.False(t, resilience.IsTransient(err))

	srv2, client2, _ := server(t, reply{code: 501})
	_, err = get(t, client2, srv2.URL)
	c = resilience.PermanentAs(resilience.Classifier{}, func(e *httpretry.StatusError) bool { return e.Code == http.StatusNotImplemented })
	assert.False(t, c.IsTransient(err))
	assert.True(t, resilience.IsTransient(err))
	assert.True(t, errors.Is(err, httpretry.ErrStatus))
}
