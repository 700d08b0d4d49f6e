package connectors_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/pipeline"
)

// rabbitQueue declares a queue for one benchmark run, deleted when b
// ends, and returns a channel in confirm mode and the queue's name.
func rabbitQueue(b *testing.B, url string) (*amqp.Channel, string) {
	b.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := uniqueName("sluice-bench")
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = conn.Close()
	})
	return ch, q
}

// publishConfirmed publishes body to q on ch and waits for its confirm.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, q string) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: body})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return errNacked
	}
	return nil
}

type nackError struct{}

func (nackError) Error() string { return "publish nacked" }

var errNacked error = nackError{}

// BenchmarkRabbitMQPublish publishes b.N messages, each waiting for its
// confirm, publishers at once on one channel: the client, and the
// connector's Publisher under Parallel.
func BenchmarkRabbitMQPublish(b *testing.B) {
	url := servicetest.RabbitMQ(b)
	b.Run("impl=client", func(b *testing.B) {
		ch, q := rabbitQueue(b, url)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		err := fanOut(b.N, func(int) error { return publishConfirmed(ctx, ch, q) })
		rate(b, start)
		if err != nil {
			b.Fatal(err)
		}
	})
	b.Run("impl=sluice", func(b *testing.B) {
		_, q := rabbitQueue(b, url)
		pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[int]{URL: url, RoutingKey: q,
			Publishing: func(int) (amqp.Publishing, error) { return amqp.Publishing{Body: body}, nil },
			Confirms:   rabbitmq.Confirms{Enabled: true, WaitFor: true}})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		publishThrough(b, pub)
		rate(b, start)
		b.StopTimer()
		_ = pub.Close(context.Background())
	})
}

// fillQueue publishes n messages to q, untimed, and waits for the last
// confirm.
func fillQueue(b *testing.B, ch *amqp.Channel, q string, n int) {
	b.Helper()
	ctx := context.Background()
	var last *amqp.DeferredConfirmation
	for range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: body})
		if err != nil {
			b.Fatal(err)
		}
		last = dc
	}
	if last != nil {
		if _, err := last.WaitContext(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRabbitMQConsume consumes b.N messages with manual acks and a
// prefetch of batch: the client, and the connector's Source into a
// pipeline.
func BenchmarkRabbitMQConsume(b *testing.B) {
	url := servicetest.RabbitMQ(b)
	b.Run("impl=client", func(b *testing.B) {
		ch, q := rabbitQueue(b, url)
		fillQueue(b, ch, q, b.N)
		if err := ch.Qos(batch, 0, false); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			d := <-deliveries
			if err := d.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
		rate(b, start)
	})
	b.Run("impl=sluice", func(b *testing.B) {
		ch, q := rabbitQueue(b, url)
		fillQueue(b, ch, q, b.N)
		src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: url, Queue: q, Prefetch: batch})
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
		ch, q := rabbitQueue(b, url)
		fillQueue(b, ch, q, b.N)
		src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: url, Queue: q, Prefetch: batch,
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
