// Package connectors_test measures messages per second through each
// broker connector beside the broker's client used directly for the same
// work, in the same run, so that the ratio is the connector's overhead.
// It needs the brokers (internal/servicetest finds them) and skips
// without them. Run it with make bench, which runs it with a small
// -benchtime: each op is one message through a real broker.
package connectors_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// publishers is how many publishes are in flight at once, in both the
// client's baseline and the connector's sink (pipeline.Parallel): each
// waits for its own PubAck or confirm.
const publishers = 16

// batch is the messages a consumer holds unsettled: the JetStream pull
// size and the connector's Batch, RabbitMQ's prefetch.
const batch = 64

// body is the payload of every message.
var body = make([]byte, 128)

// uniqueName returns a fresh name for a benchmark's stream or queue.
func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// rate reports the messages per second of the timed part of b.
func rate(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// fanOut runs publish(i) for i in [0, n) on publishers goroutines, and
// returns the first error.
func fanOut(n int, publish func(i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range publishers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := publish(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// publishThrough runs b.N items through a pipeline whose sink is sink,
// under Parallel(publishers).
func publishThrough(b *testing.B, sink node.Sink[int]) {
	b.Helper()
	p := pipeline.New("publish")
	n := b.N
	src := pipeline.Source(p, "numbers", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	pipeline.Sink(p, "publish", src, sink, pipeline.Parallel(publishers))
	pl, err := p.Build()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pl.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// consumeThrough runs a pipeline from src to a sink that counts, until
// the sink has seen n messages; stop ends the source.
func consumeThrough[T any](b *testing.B, src node.Source[T], n int, stop func(), opts ...pipeline.Option) {
	b.Helper()
	consumeWith(b, src, n, stop, nil, nil, opts...)
}

// consumeWith is consumeThrough whose sink, under nodeOpts, calls handle
// (when not nil) on each message before it counts it.
func consumeWith[T any](b *testing.B, src node.Source[T], n int, stop func(), handle func(T) error, nodeOpts []pipeline.NodeOption, opts ...pipeline.Option) {
	b.Helper()
	p := pipeline.New("consume", opts...)
	var seen atomic.Int64
	pipeline.ForEach(p, "count", pipeline.Source(p, "consume", src), func(_ context.Context, m T) error {
		if handle != nil {
			if err := handle(m); err != nil {
				return err
			}
		}
		if int(seen.Add(1)) == n {
			stop()
		}
		return nil
	}, nodeOpts...)
	pl, err := p.Build()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := pl.Run(ctx); err != nil {
		b.Fatal(err)
	}
	if int(seen.Load()) != n {
		b.Fatalf("consumed %d messages, want %d", seen.Load(), n)
	}
}
