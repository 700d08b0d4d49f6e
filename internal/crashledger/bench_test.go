package crashledger_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/crashledger"
)

// BenchmarkLedger measures what the ledger adds to each message a source
// takes (Entry, Turn, Settle), with a prefetch of 64 in flight, beside no
// ledger: "ledger" syncs at most every second (the default), "sync-each"
// at every write.
func BenchmarkLedger(b *testing.B) {
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = "orders/" + strconv.Itoa(i+1_000_000)
	}
	const inFlight = 64
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		ring := make([]string, inFlight)
		for i := 0; b.Loop(); i++ {
			ring[i%inFlight] = ids[i%len(ids)]
		}
	})
	for name, sync := range map[string]crashledger.Options{"ledger": {}, "sync-each": {SyncEvery: -1}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			l, err := crashledger.Open(filepath.Join(b.TempDir(), "crash.ledger"), sync)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			ring := make([]*crashledger.Entry, inFlight)
			for i := 0; b.Loop(); i++ {
				if old := ring[i%inFlight]; old != nil {
					old.Settle()
				}
				e := l.Entry(ids[i%len(ids)])
				if err := e.Turn(ctx); err != nil {
					b.Fatal(err)
				}
				ring[i%inFlight] = e
			}
		})
	}
}
