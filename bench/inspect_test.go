package bench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// BenchmarkInspector measures what the live inspector page (observer/inspect)
// costs a pipeline that fails nothing, beside the same pipeline without it
// (impl=none), in the same run: attached with nobody watching
// (impl=inspector-idle), and with one page connected to its event stream,
// which takes a snapshot of the counters every 10 ms, fifty times as often
// as the default (impl=inspector-watched; the snapshots it read are
// reported as snapshots/run).
func BenchmarkInspector(b *testing.B) {
	double := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) { return x * 2, nil })
	benchInspector(b, func(b *testing.B, opts []pipeline.Option) { runEngineWith(b, opts, double) })
}

var errBench = resilience.MarkPermanent(errors.New("bench: bad item"))

// BenchmarkInspectorDeadLetters is BenchmarkInspector with one item in a
// hundred dead-lettered, each with a reason of its own that names it (the
// worst case for the page's groups: every snapshot sorts the reasons kept),
// which the inspector lists for the page.
func BenchmarkInspectorDeadLetters(b *testing.B) {
	failing := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		if x%100 == 99 {
			return 0, resilience.MarkPermanent(fmt.Errorf("order %d: %w", x, errBench))
		}
		return x * 2, nil
	})
	benchInspector(b, func(b *testing.B, opts []pipeline.Option) {
		opts = append(opts, pipeline.WithDeadLetter(deadletter.Func(func(context.Context, deadletter.Envelope) error { return nil })),
			pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
		runEngineWith(b, opts, failing)
	})
}

func benchInspector(b *testing.B, run func(*testing.B, []pipeline.Option)) {
	b.Run("impl=none", func(b *testing.B) { run(b, nil) })
	b.Run("impl=inspector-idle", func(b *testing.B) {
		run(b, []pipeline.Option{pipeline.WithObserver(inspect.New())})
	})
	b.Run("impl=inspector-watched", func(b *testing.B) {
		in := inspect.New(inspect.WithInterval(10 * time.Millisecond))
		srv := httptest.NewServer(in)
		ctx, cancel := context.WithCancel(context.Background())
		var snapshots atomic.Int64
		read := watch(b, ctx, srv.URL, &snapshots)
		defer func() {
			cancel()
			<-read
			srv.Close()
		}()
		run(b, []pipeline.Option{pipeline.WithObserver(in)})
		b.ReportMetric(float64(snapshots.Load()), "snapshots/run")
	})
}

// watch connects a client to the event stream and reads it until ctx ends;
// the channel closes when it stopped. It returns once the first snapshot
// arrived, so that the client watches the whole run.
func watch(b *testing.B, ctx context.Context, url string, snapshots *atomic.Int64) <-chan struct{} {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/events", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "event: stats") {
				snapshots.Add(1)
			}
		}
	}()
	return done
}
