package bench_test

import (
	"io"
	"log/slog"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/otel"
	"github.com/sluicehq/sluice/observer/prometheus"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/pipeline"
)

// TestMain checks that no benchmark leaves a goroutine behind: every
// engine run and every hand-written baseline must end all it started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// BenchmarkObserver measures what attaching each observer plug-in costs a
// pipeline that fails nothing, beside the same pipeline without one
// (impl=none), in the same run: the per-item counts are read at scrape time,
// so the plug-ins are called only when nodes start and complete.
func BenchmarkObserver(b *testing.B) {
	with := func(obs observer.Observer) []pipeline.Option { return []pipeline.Option{pipeline.WithObserver(obs)} }
	b.Run("impl=none", func(b *testing.B) { runEngine(b, nil) })
	b.Run("impl=prometheus", func(b *testing.B) { runEngine(b, with(prometheus.New())) })
	b.Run("impl=otel", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer mp.Shutdown(b.Context())
		o, err := otel.New(mp)
		if err != nil {
			b.Fatal(err)
		}
		runEngine(b, with(o))
	})
	b.Run("impl=slog", func(b *testing.B) {
		h := slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})
		runEngine(b, with(slogobserver.New(slog.New(h))))
	})
}
