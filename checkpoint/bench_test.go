package checkpoint_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// BenchmarkFileSave measures a Save of a new position: a file written,
// synced, renamed and its directory synced. The file holds pairs
// positions of 32 bytes.
func BenchmarkFileSave(b *testing.B) {
	for _, pairs := range []int{1, 100} {
		b.Run(fmt.Sprint("pairs=", pairs), func(b *testing.B) {
			f := openFile(b, filepath.Join(b.TempDir(), "positions.json"))
			ctx := context.Background()
			for i := range pairs {
				if err := f.Save(ctx, "orders", fmt.Sprint("source-", i), make([]byte, 32)); err != nil {
					b.Fatal(err)
				}
			}
			n := 0
			for b.Loop() {
				n++
				if err := f.Save(ctx, "orders", "source-0", fmt.Appendf(nil, "offset=%026d", n)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFileSaveParallel measures Saves of many goroutines at once,
// each its own pair: they share writes.
func BenchmarkFileSaveParallel(b *testing.B) {
	f := openFile(b, filepath.Join(b.TempDir(), "positions.json"))
	ctx := context.Background()
	var source atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprint("source-", source.Add(1))
		n := 0
		for pb.Next() {
			n++
			if err := f.Save(ctx, "orders", name, fmt.Appendf(nil, "offset=%d", n)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkFileSaveUnchanged measures a Save of the position already
// kept: no write.
func BenchmarkFileSaveUnchanged(b *testing.B) {
	f := openFile(b, filepath.Join(b.TempDir(), "positions.json"))
	ctx := context.Background()
	pos := []byte("offset=1024")
	for b.Loop() {
		if err := f.Save(ctx, "orders", "read", pos); err != nil {
			b.Fatal(err)
		}
	}
}
