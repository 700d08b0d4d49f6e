package connectors_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/pipeline"
)

// natsStream creates a memory stream for one benchmark run, deleted when
// b ends, and returns the client's JetStream context and the subject.
func natsStream(b *testing.B, url string) (jetstream.JetStream, string, string) {
	b.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	name := uniqueName("sluice-bench")
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), name)
		nc.Close()
	})
	return js, name, name + ".in"
}

// fill publishes n messages to subject, untimed, for a consume benchmark.
func fill(b *testing.B, js jetstream.JetStream, subject string, n int) {
	b.Helper()
	for range n {
		if _, err := js.PublishAsync(subject, body); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishes not acknowledged")
	}
}

// BenchmarkNATSPublish publishes b.N messages, each waiting for its
// PubAck, publishers at once: the client's Publish, and the connector's
// Publisher under Parallel.
func BenchmarkNATSPublish(b *testing.B) {
	url := servicetest.NATS(b)
	b.Run("impl=client", func(b *testing.B) {
		js, _, subject := natsStream(b, url)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		err := fanOut(b.N, func(int) error {
			_, err := js.Publish(ctx, subject, body)
			return err
		})
		rate(b, start)
		if err != nil {
			b.Fatal(err)
		}
	})
	b.Run("impl=sluice", func(b *testing.B) {
		_, _, subject := natsStream(b, url)
		pub, err := nats.NewPublisher(nats.PublisherConfig[int]{URL: url, Subject: subject,
			Message: func(int) (*natsgo.Msg, error) { return &natsgo.Msg{Data: body}, nil }})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		publishThrough(b, pub)
		rate(b, start)
	})
}

// BenchmarkNATSConsume consumes b.N messages from a durable pull consumer,
// acking each, with at most batch messages pulled ahead: the client's
// Messages iterator, and the connector's Source into a pipeline.
func BenchmarkNATSConsume(b *testing.B) {
	url := servicetest.NATS(b)
	b.Run("impl=client", func(b *testing.B) {
		js, name, subject := natsStream(b, url)
		fill(b, js, subject, b.N)
		ctx := context.Background()
		cons, err := js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		it, err := cons.Messages(jetstream.PullMaxMessages(batch))
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		rate(b, start)
		it.Stop()
	})
	b.Run("impl=sluice", func(b *testing.B) {
		js, name, subject := natsStream(b, url)
		fill(b, js, subject, b.N)
		src, err := nats.NewSource(nats.SourceConfig{URL: url, Stream: name, Consumer: name, Batch: batch})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		consumeThrough(b, src, b.N, src.Stop)
		rate(b, start)
	})
	// The same with a crash ledger: a write(2) per message.
	b.Run("impl=sluice-crashledger", func(b *testing.B) {
		js, name, subject := natsStream(b, url)
		fill(b, js, subject, b.N)
		src, err := nats.NewSource(nats.SourceConfig{URL: url, Stream: name, Consumer: name, Batch: batch,
			CrashLedger: filepath.Join(b.TempDir(), "crash.ledger")})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		consumeThrough(b, src, b.N, src.Stop, pipeline.WithDeadLetter(deadletter.NewMemory(1)))
		rate(b, start)
	})
}
