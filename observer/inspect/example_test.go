package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A program passes the Inspector to its pipeline as an observer and
// mounts it where it chooses, here under /inspect/ of its own mux; a real
// program serves the mux with http.ListenAndServe on the address it was
// told (such as an -inspect-addr flag) and opens /inspect/ in a browser.
// The page is read-only: AllowDrain and AllowCancel add its buttons.
func Example() {
	in := inspect.New()
	b := pipeline.New("orders", pipeline.WithObserver(in))
	nums := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	pipeline.Sink(b, "store", nums, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}

	mux := http.NewServeMux()
	mux.Handle("/inspect/", http.StripPrefix("/inspect", in))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	// What the page's event stream sends, read once.
	resp, err := http.Get(srv.URL + "/inspect/api/snapshot")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var snap struct {
		Pipeline string
		Running  bool
		Nodes    []struct {
			Name    string
			In, Out int64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(snap.Pipeline, "running:", snap.Running)
	for _, n := range snap.Nodes {
		fmt.Printf("%s in %d out %d\n", n.Name, n.In, n.Out)
	}
	// Output:
	// orders running: false
	// read in 0 out 3
	// store in 3 out 3
}
