package httpretry_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/resilience/httpretry"
)

// One line turns a call's result into an error that the pipeline's retry
// layers understand: a throttled call waits what the server asked for,
// a missing resource is not retried, a success is left to read.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/busy":
			w.Header().Set("Retry-After", "3")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/gone":
			http.Error(w, "no such rate", http.StatusNotFound)
		default:
			fmt.Fprint(w, "0.92")
		}
	}))
	defer srv.Close()

	for _, path := range []string{"/busy", "/gone", "/rate"} {
		resp, err := httpretry.Check(http.Get(srv.URL + path + "?key=secret"))
		if err != nil {
			var se *httpretry.StatusError
			if errors.As(err, &se) {
				fmt.Printf("%s: %d %q transient=%v", path, se.Code, se.Body, resilience.IsTransient(err))
			}
			if d, ok := resilience.RetryAfterOf(err); ok {
				fmt.Printf(" retry after %v", d)
			}
			fmt.Println()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %s\n", path, body)
	}
	// Output:
	// /busy: 429 "slow down\n" transient=true retry after 3s
	// /gone: 404 "no such rate\n" transient=false
	// /rate: 0.92
}
