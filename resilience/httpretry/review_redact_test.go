package httpretry_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience/httpretry"
)

// Finding 4: the package doc says "Errors never show a URL's user
// information or its query values, which often hold credentials". Two
// ways a query's secret still shows:
//   - a query that is a bare token ("/feed?s3cret", as some feed and
//     webhook URLs are): redact replaces values, and the token is the
//     key: "feed?s3cret=redacted";
//   - a redirect whose Location Go cannot parse: the client's error,
//     a url.Error, names the Location in its Err ("failed to parse
//     Location header ..."), which callError does not redact (it
//     redacts url.Error.URL only).
func TestReviewQuerySecretsNeverShow(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			w.Header().Set("Location", "/next%zz?apikey=s3cret")
			w.WriteHeader(http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	for _, u := range []string{srv.URL + "/feed?s3cret", srv.URL + "/redirect"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		require.NoError(t, err)
		resp, err := httpretry.Check(srv.Client().Do(req))
		require.Nil(t, resp)
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "s3cret", "%s", u)
	}
}
