package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// BenchmarkDemo runs the demo's job on 100 000 rows, as make demo does but
// with an exchange-rate service that answers at once and never fails (the
// retries' jittered waits, on the real clock, would make most of the
// spread), without a checkpoint and with one saved every second: the cost
// of the checkpoint is the difference. Each op is one whole run into a new
// database.
//
// Run each in a process of its own, alternately (a process's first run
// pays for its warm-up), and compare with benchstat:
//
//	go test -c -o demo.test ./samples/etl/
//	for i in $(seq 10); do for impl in no-checkpoint checkpoint-1s; do
//		./demo.test -test.run='^$' -test.bench="Demo/impl=$impl\$" -test.benchtime=1x
//	done; done | tee demo.out
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /impl demo.out
func BenchmarkDemo(b *testing.B) {
	input := filepath.Join(b.TempDir(), "orders.csv")
	if _, err := writeOrders(input, 100_000, 1); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		every time.Duration
	}{
		{"impl=no-checkpoint", 0},
		{"impl=checkpoint-1s", time.Second},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var rows int64
			for b.Loop() {
				b.StopTimer()
				dir, err := os.MkdirTemp(b.TempDir(), "run")
				if err != nil {
					b.Fatal(err)
				}
				cfg := config{
					rows: 100_000, workers: 64, seed: 1,
					input: input, checkpointEvery: bc.every,
					db: filepath.Join(dir, "orders.db"), dlq: filepath.Join(dir, "dead-letters.jsonl"),
				}
				b.StartTimer()
				s, err := runETL(context.Background(), cfg, clockwork.NewRealClock(), io.Discard, nil)
				if err != nil {
					b.Fatal(err)
				}
				rows += s.read()
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
