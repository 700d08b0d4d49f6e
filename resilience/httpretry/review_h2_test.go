package httpretry_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/resilience/httpretry"
)

// Finding 2: the package doc says a connection "that the server dropped"
// is transient, and getting-started step 9 that network errors
// ("refused, dropped, timed out") are transient. A server that aborts
// the request (a handler that panics, a proxy whose upstream died) drops
// it: over HTTP/1.1 the client sees io.EOF, transient; over HTTP/2, the
// protocol Go's client speaks to any TLS server that offers it, the
// same abort is a stream reset (http2StreamError, INTERNAL_ERROR), which
// is neither a net.Error nor io.EOF: permanent, so the item fails or is
// dead-lettered without a retry.
func TestReviewDroppedOverHTTP2IsTransient(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic(http.ErrAbortHandler) // the server drops the request
		}))
		srv.EnableHTTP2 = h2
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		defer srv.Close()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		if resp != nil {
			assert.Equal(t, h2, resp.ProtoMajor == 2)
		}
		resp, err = httpretry.Check(resp, err)
		require.Nil(t, resp)
		require.Error(t, err)
		assert.True(t, resilience.IsTransient(err), "HTTP/2=%v: a dropped request is transient: %v", h2, err)
	}
}
