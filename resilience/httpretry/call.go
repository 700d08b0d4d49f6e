package httpretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/resilience"
)

// callError classifies the error of a call that got no response worth
// reading: resp is not nil only when the client's CheckRedirect refused
// to follow a redirect (its body is closed already).
//
// A transport error is judged by exclusion: the few that no retry fixes
// (see noRetryFixes) and a cancellation are left to the classifier; the
// rest is transient, since the server, a proxy or the network dropped
// the request, whatever the protocol calls it (io.EOF over HTTP/1.1, a
// stream reset or a GOAWAY over HTTP/2, a lost connection).
func callError(resp *http.Response, err error) error {
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) && err == error(ue) {
		// A url.Error is a net.Error whatever it wraps: judge what it
		// wraps.
		cause = ue.Err
	}
	red := redactCall(err)
	switch {
	case errors.Is(cause, context.Canceled):
		// The caller's, or the pipeline's: never retried, never the
		// item's fault. Left as it is.
		return red
	case resp != nil, noRetryFixes(err, cause):
		return red
	}
	return resilience.MarkTransient(red)
}

// contextEnded is the error of a call that failed once its request's
// context had ended with ctxErr: context.Canceled, which is never
// retried and is not the item's fault, or context.DeadlineExceeded,
// which is transient. The transport returns the context's cause, which
// says neither when the context was cancelled with one: the error
// matches ctxErr as well.
func contextEnded(err, ctxErr error) error {
	err = redactCall(err)
	if !errors.Is(err, ctxErr) {
		err = &endedError{err: err, ctxErr: ctxErr}
	}
	if ctxErr == context.Canceled {
		return resilience.MarkBlameless(err)
	}
	return err
}

// An endedError is a call's error, which matches its context's error too.
type endedError struct {
	err    error
	ctxErr error
}

func (e *endedError) Error() string   { return e.err.Error() }
func (e *endedError) Unwrap() []error { return []error{e.err, e.ctxErr} }

// refusedRequests are the starts of the texts of the errors that Go's
// client and transport give, without a type to tell them by, for a
// request they refuse to send or a redirect they cannot follow: no retry
// sends it. The tests check each against the standard library.
var refusedRequests = []string{
	"unsupported protocol scheme ",
	"failed to parse Location header ",
	"http: nil Request.URL",
	"http: nil Request.Header",
	"http: no Host in request URL",
	"net/http: invalid method ",
	"net/http: invalid header ",
	"net/http: invalid trailer ",
}

// noRetryFixes reports whether err, a call's error, or cause, what its
// url.Error wraps, is one that no retry fixes: a URL that does not
// parse, a request that the client refuses to send, a Location it cannot
// follow, a server that answers HTTPS in plain HTTP, or a certificate
// that does not verify (the server's, or the client's, refused by the
// server).
func noRetryFixes(err, cause error) bool {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Op == "parse" {
		return true // http.Get of a URL that does not parse
	}
	if cause == nil {
		return false
	}
	text := cause.Error()
	for _, prefix := range refusedRequests {
		if strings.HasPrefix(text, prefix) {
			return true
		}
	}
	if errors.Is(cause, http.ErrSchemeMismatch) {
		return true
	}
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		roots     x509.SystemRootsError
		alert     *net.OpError
	)
	switch {
	case errors.As(cause, &verify), errors.As(cause, &authority), errors.As(cause, &host),
		errors.As(cause, &invalid), errors.As(cause, &roots):
		return true
	case errors.As(cause, &alert) && alert.Op == "remote error" && alert.Err != nil:
		// crypto/tls's way to give the server's alert: those about a
		// certificate (bad, expired, unknown, required) say that the
		// server refused the client's.
		return strings.Contains(alert.Err.Error(), "certificate")
	}
	return false
}
