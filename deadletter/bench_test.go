package deadletter_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/require"
)

// BenchmarkFileWrite measures a Write under each sync policy with
// concurrent writers (b.RunParallel with 16 goroutines per CPU), beside a
// hand-written baseline: a mutex, json.Marshal, one write and one fsync per
// envelope. benchstat -col /impl puts them side by side.
func BenchmarkFileWrite(b *testing.B) {
	env := sampleEnvelope(1)
	b.Run("impl=handwritten", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "dlq.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		require.NoError(b, err)
		var mu sync.Mutex
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				line, err := json.Marshal(env)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				_, err = f.Write(append(line, '\n'))
				if err == nil {
					err = f.Sync()
				}
				mu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		require.NoError(b, f.Close())
	})
	policies := []struct {
		name string
		opts []deadletter.FileOption
	}{
		{"sluice-fsync-every-write", nil},
		{"sluice-group-commit-1ms", []deadletter.FileOption{deadletter.WithGroupCommit(time.Millisecond)}},
	}
	for _, p := range policies {
		b.Run("impl="+p.name, func(b *testing.B) {
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

// BenchmarkReadFile measures reading back a file of 1000 envelopes, beside
// a hand-written bufio.Scanner and json.Unmarshal loop that does no tear or
// corruption checks.
func BenchmarkReadFile(b *testing.B) {
	path := writeFile(b, 1000, deadletter.WithGroupCommit(time.Millisecond))
	b.Run("impl=handwritten", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := os.Open(path)
			require.NoError(b, err)
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64*1024), 1<<20)
			for sc.Scan() {
				var env deadletter.Envelope
				if err := json.Unmarshal(sc.Bytes(), &env); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, sc.Err())
			require.NoError(b, f.Close())
		}
	})
	b.Run("impl=sluice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, err := range deadletter.ReadFile(path) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkOpenFileHoldingKeys measures what OpenFile costs for a file of
// 10 000 envelopes with positions: the time to read them and keep their
// keys (ns/envelope), and the heap the keys take (B/key).
func BenchmarkOpenFileHoldingKeys(b *testing.B) {
	const n = 10_000
	path := filepath.Join(b.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path, deadletter.WithGroupCommit(time.Millisecond))
	require.NoError(b, err)
	var wg sync.WaitGroup
	for w := range 50 {
		wg.Go(func() {
			for i := w; i < n; i += 50 {
				if err := f.Write(b.Context(), positioned(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(b, f.Close())

	var heap uint64
	b.ReportAllocs()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f, err := deadletter.OpenFile(path)
		require.NoError(b, err)
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
		require.NoError(b, f.Close())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/envelope")
	b.ReportMetric(float64(heap)/n, "B/key")
}
