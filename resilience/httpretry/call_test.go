package httpretry_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/resilience/httpretry"
)

// quiet silences a test server's log: the failures it reports are the
// test's point.
func quiet(srv *httptest.Server) { srv.Config.ErrorLog = log.New(io.Discard, "", 0) }

// redirector answers /redirect with a redirect to location, /loop with a
// redirect to itself, and anything else with 403.
func redirector(t *testing.T, location string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			w.Header().Set("Location", location)
			w.WriteHeader(http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop?apikey=s3cret", http.StatusFound)
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A call that no retry fixes is left permanent, and its error shows no
// query value: a URL that does not parse, a request that the client
// refuses to send, a redirect it cannot or may not follow, an HTTPS
// request answered in plain HTTP, a certificate that does not verify.
// Each error text is Go's own: the test checks that httpretry knows them.
func TestCallsNoRetryFixes(t *testing.T) {
	t.Parallel()
	plain := redirector(t, "/next%zz?apikey=s3cret")
	refused := redirector(t, "/next?apikey=s3cret")
	for _, c := range []struct {
		name string
		call func(t *testing.T) (*http.Response, error)
		want string // in the error's text
	}{
		{"unparsable URL", func(*testing.T) (*http.Response, error) {
			return http.Get(plain.URL + "/%zz?apikey=s3cret")
		}, "invalid URL escape"},
		{"unsupported scheme", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), "gopher://example.com/?apikey=s3cret", nil)
		}, "unsupported protocol scheme"},
		{"no host", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), "http:///rates?apikey=s3cret", nil)
		}, "no Host"},
		{"nil URL", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), plain.URL, func(r *http.Request) { r.URL = nil })
		}, "nil Request.URL"},
		{"invalid method", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), plain.URL+"/?apikey=s3cret", func(r *http.Request) { r.Method = "BAD METHOD" })
		}, "invalid method"},
		{"invalid header", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), plain.URL+"/?apikey=s3cret", func(r *http.Request) { r.Header["X-Bad"] = []string{"a\nb"} })
		}, "invalid header"},
		{"unparsable Location", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), plain.URL+"/redirect", nil)
		}, "failed to parse Location header"},
		{"CheckRedirect refuses", func(t *testing.T) (*http.Response, error) {
			client := *refused.Client() // a copy: the server's is shared
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return errors.New("no redirects here") }
			return do(t, &client, refused.URL+"/redirect", nil)
		}, "no redirects here"},
		{"too many redirects", func(t *testing.T) (*http.Response, error) {
			return do(t, refused.Client(), refused.URL+"/loop", nil)
		}, "stopped after 10 redirects"},
		{"HTTPS answered in HTTP", func(t *testing.T) (*http.Response, error) {
			return do(t, plain.Client(), strings.Replace(plain.URL, "http://", "https://", 1)+"/?apikey=s3cret", nil)
		}, http.ErrSchemeMismatch.Error()},
		{"unknown authority", func(t *testing.T) (*http.Response, error) {
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			quiet(srv)
			srv.StartTLS()
			t.Cleanup(srv.Close)
			return do(t, http.DefaultClient, srv.URL+"/?apikey=s3cret", nil) // does not trust the test certificate
		}, "certificate signed by unknown authority"},
		{"wrong host", func(t *testing.T) (*http.Response, error) {
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			quiet(srv)
			srv.StartTLS()
			t.Cleanup(srv.Close)
			// Trusts the certificate, which is not for the host asked
			// for; every dial goes to the test server.
			tr := srv.Client().Transport.(*http.Transport).Clone()
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
			}
			t.Cleanup(tr.CloseIdleConnections)
			return do(t, &http.Client{Transport: tr}, "https://rates.invalid/?apikey=s3cret", nil)
		}, "not rates.invalid"},
		{"client certificate refused", func(t *testing.T) (*http.Response, error) {
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			quiet(srv)
			srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			return do(t, srv.Client(), srv.URL+"/?apikey=s3cret", nil)
		}, "certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			resp, err := httpretry.Check(c.call(t))
			require.Nil(t, resp)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.False(t, resilience.IsTransient(err), "no retry fixes it: %v", err)
			assert.False(t, resilience.IsBlameless(err))
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

// do sends a GET of rawURL with client, after edit changes the request.
func do(t *testing.T, client *http.Client, rawURL string, edit func(*http.Request)) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	if edit != nil {
		edit(req)
	}
	return client.Do(req)
}

// A request that the server or the network drops is transient over
// HTTP/2 as over HTTP/1.1: a stream reset, a lost connection.
func TestDroppedOverHTTP2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		handle func(srv *httptest.Server) http.HandlerFunc
	}{
		{"stream reset", func(*httptest.Server) http.HandlerFunc {
			return func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }
		}},
		{"connection lost", func(srv *httptest.Server) http.HandlerFunc {
			return func(http.ResponseWriter, *http.Request) { srv.CloseClientConnections() }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewUnstartedServer(nil)
			srv.Config.Handler = c.handle(srv)
			srv.EnableHTTP2 = true
			quiet(srv)
			srv.StartTLS()
			t.Cleanup(srv.Close)
			raw, err := do(t, srv.Client(), srv.URL+"/?apikey=s3cret", nil)
			if raw != nil {
				assert.Equal(t, 2, raw.ProtoMajor)
			}
			resp, err := httpretry.Check(raw, err)
			require.Nil(t, resp)
			require.Error(t, err)
			assert.True(t, resilience.IsTransient(err), "%v", err)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

// Do sees the request's context. Cancelled, with a cause or without,
// the call is never retried, not the item's fault, and matches
// context.Canceled and the cause; past a deadline, with a cause or
// without, it is transient and matches context.DeadlineExceeded. Check,
// which sees the cause alone, takes a cancellation with a cause for a
// transport's error: transient, and the item's.
func TestDoSeesTheContext(t *testing.T) {
	t.Parallel()
	srv, client, b := server(t, reply{code: 200})
	errCause := errors.New("shutting down")
	past := time.Now().Add(-time.Second)
	for _, c := range []struct {
		name      string
		ctx       func() context.Context
		target    error
		transient bool
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, context.Canceled, false},
		{"cancelled with a cause", func() context.Context {
			ctx, cancel := context.WithCancelCause(t.Context())
			cancel(errCause)
			return ctx
		}, context.Canceled, false},
		{"deadline", func() context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), past)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded, true},
		{"deadline with a cause", func() context.Context {
			ctx, cancel := context.WithDeadlineCause(t.Context(), past, errCause)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(c.ctx(), http.MethodGet, srv.URL+"/?apikey=s3cret", nil)
			require.NoError(t, err)
			resp, err := httpretry.Do(client, req)
			require.Nil(t, resp)
			require.ErrorIs(t, err, c.target)
			if context.Cause(req.Context()) == errCause {
				assert.ErrorIs(t, err, errCause, "the cause is kept")
			}
			assert.Equal(t, c.transient, resilience.IsTransient(err), "%v", err)
			assert.Equal(t, !c.transient, resilience.IsBlameless(err), "%v", err)
			assert.NotContains(t, err.Error(), "s3cret")
			var ue *url.Error
			assert.ErrorAs(t, err, &ue, "what the client returned is kept")

			_, err = httpretry.Check(client.Do(req))
			require.Error(t, err)
			switch {
			case c.name == "cancelled with a cause":
				assert.True(t, resilience.IsTransient(err), "Check cannot tell: %v", err)
				assert.False(t, resilience.IsBlameless(err))
			case c.transient:
				assert.True(t, resilience.IsTransient(err), "a deadline is transient for Check too: %v", err)
			default:
				assert.False(t, resilience.IsTransient(err))
				assert.True(t, resilience.IsBlameless(err))
			}
		})
	}
	_, all := b.closed()
	assert.True(t, all)
}

// Do, when the context is live, is Check of the client's result; a nil
// client is http.DefaultClient, and a nil request an error.
func TestDo(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "0.92")
	}))
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/rate", nil)
	require.NoError(t, err)
	resp, err := httpretry.Do(nil, req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "0.92", string(body))

	req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/busy", nil)
	require.NoError(t, err)
	resp, err = httpretry.Do(srv.Client(), req)
	require.Nil(t, resp)
	var se *httpretry.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 503, se.Code)
	d, ok := resilience.RetryAfterOf(err)
	assert.True(t, ok)
	assert.Equal(t, 7*time.Second, d)

	resp, err = httpretry.Do(srv.Client(), nil)
	require.Nil(t, resp)
	assert.EqualError(t, err, "httpretry: nil request")
}

// A query's values never show, nor the name of a parameter without a
// value (a bare token), in a status error's URL.
func TestQueryRedacted(t *testing.T) {
	t.Parallel()
	srv, client, _ := server(t, reply{code: 403})
	for query, want := range map[string]string{
		"s3cret":                   "redacted",
		"s3cret=":                  "redacted",
		"=s3cret":                  "redacted",
		"base=EUR&s3cret":          "base=redacted&redacted",
		"s3cret&apikey=s3cret&x=1": "redacted&apikey=redacted&x=redacted",
		"a=1&&b=s3cret":            "a=redacted&&b=redacted",
		"a=%zzs3cret":              "redacted", // does not parse
		"a=1;b=s3cret":             "redacted", // does not parse either
	} {
		_, err := get(t, client, srv.URL+"/feed?"+query)
		var se *httpretry.StatusError
		require.ErrorAs(t, err, &se, query)
		assert.Equal(t, srv.URL+"/feed?"+want, se.URL, query)
		assert.NotContains(t, err.Error(), "s3cret", query)
	}
}

// timeoutError is a transport's error that quotes a URL with its query.
type timeoutError struct{ url string }

func (e *timeoutError) Error() string   { return "dial " + e.url + ": i/o timeout" }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// A transport's error that quotes a URL loses the URL's query (up to
// the next space or quote), fragment and user information in the text,
// and keeps what it is: errors.As finds it, and
// the url.Error around it still says it timed out.
func TestErrorTextScrubbed(t *testing.T) {
	t.Parallel()
	cause := &timeoutError{url: "http://alice:pw@proxy.example/x?token=s3cret#frag"}
	client := &http.Client{Transport: failingTransport{cause}}
	resp, err := get(t, client, "http://rates.example/?apikey=s3cret")
	require.Nil(t, resp)
	require.Error(t, err)
	assert.Equal(t, `Get "http://rates.example/?apikey=redacted": dial http://proxy.example/x?redacted i/o timeout`, err.Error())
	var te *timeoutError
	require.ErrorAs(t, err, &te)
	assert.Same(t, cause, te)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	assert.True(t, ue.Timeout())
	assert.True(t, resilience.IsTransient(err))
}

// Whatever the query, a status error's URL keeps no value of it: every
// value left is "redacted", and every name left had a value (a bare
// token is replaced whole).
func FuzzQueryRedacted(f *testing.F) {
	for _, q := range []string{"s3cret", "a=1&b", "=x", "a=1&&b=2", "a=%zz", "a=1;b=2", "k=v=w", "%41=%42"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		u, err := url.Parse("http://rates.example/feed")
		require.NoError(t, err)
		u.RawQuery = query
		if back, err := url.Parse(u.String()); err != nil || back.RawQuery != query {
			t.Skip("no request has this URL") // a control character, a '#'
		}
		in, inErr := url.ParseQuery(query)
		resp := &http.Response{StatusCode: 403, Request: &http.Request{Method: http.MethodGet, URL: u}, Body: http.NoBody}
		_, err = httpretry.Check(resp, nil)
		var se *httpretry.StatusError
		require.ErrorAs(t, err, &se)
		out, err := url.Parse(se.URL)
		require.NoError(t, err, se.URL)
		if query == "" {
			assert.Empty(t, out.RawQuery)
			return
		}
		got, err := url.ParseQuery(out.RawQuery)
		require.NoError(t, err, se.URL)
		for k, vs := range got {
			for _, v := range vs {
				if k == "redacted" && v == "" {
					continue // a bare token, or a query that did not parse
				}
				assert.Equal(t, "redacted", v, "%q gave %q", query, se.URL)
				require.NoError(t, inErr, "%q gave %q", query, se.URL)
				_, had := in[k]
				assert.True(t, had, "%q gave %q", query, se.URL)
			}
		}
	})
}
