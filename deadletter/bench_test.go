package deadletter_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
)

// BenchmarkFileWrite measures a Write under each sync policy with
// concurrent writers (b.RunParallel, GOMAXPROCS goroutines by default; run
// with -cpu to vary them).
func BenchmarkFileWrite(b *testing.B) {
	policies := []struct {
		name string
		opts []deadletter.FileOption
	}{
		{"fsync-every-write", nil},
		{"group-commit-1ms", []deadletter.FileOption{deadletter.WithGroupCommit(time.Millisecond)}},
	}
	env := sampleEnvelope(1)
	for _, p := range policies {
		b.Run(p.name, func(b *testing.B) {
			f, err := deadletter.OpenFile(filepath.Join(b.TempDir(), "dlq.jsonl"), p.opts...)
			require.NoError(b, err)
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := f.Write(b.Context(), env); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			s := f.Stats()
			b.ReportMetric(float64(s.Writes)/float64(max(s.Syncs, 1)), "writes/fsync")
			require.NoError(b, f.Close())
		})
	}
}

// BenchmarkReadFile measures reading back a file of 1000 envelopes.
func BenchmarkReadFile(b *testing.B) {
	path := writeFile(b, 1000, deadletter.WithGroupCommit(time.Millisecond))
	b.ReportAllocs()
	for b.Loop() {
		for _, err := range deadletter.ReadFile(path) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
