package file_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
)

// benchFile writes a CSV file of about mb megabytes: a header, then
// records of about 40 bytes.
func benchFile(b *testing.B, mb int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "orders.csv")
	var sb strings.Builder
	sb.WriteString("id,sku,qty,price\n")
	for i := 0; sb.Len() < mb<<20; i++ {
		sb.WriteString(strconv.Itoa(i))
		sb.WriteString(",sku-")
		sb.WriteString(strconv.Itoa(i % 997))
		sb.WriteString(",")
		sb.WriteString(strconv.Itoa(i % 13))
		sb.WriteString(",19.99\n")
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// megabytes is the size of the benchmarks' file: 8, or SLUICE_FILE_MB.
func megabytes() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_FILE_MB")); err == nil && n > 0 {
		return n
	}
	return 8
}

// BenchmarkOpen measures Open, which counts the lines for Size.
func BenchmarkOpen(b *testing.B) {
	mb := megabytes()
	path := benchFile(b, mb)
	b.SetBytes(int64(mb) << 20)
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		src := file.CSV(path, file.CSVOptions{Header: true})
		if err := src.Open(ctx); err != nil {
			b.Fatal(err)
		}
		if src.Size() <= 0 {
			b.Fatal("no size")
		}
		_ = src.Close(ctx)
	}
}

// BenchmarkRun measures a whole run: Open, then every record emitted.
func BenchmarkRun(b *testing.B) {
	mb := megabytes()
	path := benchFile(b, mb)
	b.SetBytes(int64(mb) << 20)
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		src := file.CSV(path, file.CSVOptions{Header: true})
		if err := src.Run(ctx, &discardEmitter[file.Record]{}); err != nil {
			b.Fatal(err)
		}
	}
}

type discardEmitter[T any] struct{ recorder[T] }

func (*discardEmitter[T]) EmitAt(context.Context, T, []byte) error { return nil }
