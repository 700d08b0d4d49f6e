package connectors_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
)

// The Kafka benchmarks run on a kfake cluster in the benchmark's process
// (no broker is needed), the same one for the client's baseline and the
// connector in each run: its CPU cost is the same for both sides.

// kafkaInFlight is the most records a consumer holds: polled at once by
// the client's baseline, and MaxInFlight of the connector's Source (which
// counts the records settled and not yet committed too, so that it
// commits every kafkaInFlight/2 records).
const kafkaInFlight = 1024

// kafkaCluster starts a one-broker cluster for b, closed when b ends.
func kafkaCluster(b *testing.B) *kfake.Cluster {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// kafkaTopic creates a topic of three partitions on c and returns its
// name.
func kafkaTopic(b *testing.B, c *kfake.Cluster) string {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	name := uniqueName("sluice-bench")
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, name); err != nil {
		b.Fatal(err)
	}
	return name
}

// kafkaFill produces n records to topic, untimed, for a consume
// benchmark.
func kafkaFill(b *testing.B, c *kfake.Cluster, topic string, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for range n {
		cl.Produce(context.Background(), &kgo.Record{Value: body}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkKafkaPublish produces b.N records, each waiting for its ack
// (acks=all, idempotent), publishers at once: the client's ProduceSync,
// and the connector's Publisher under Parallel.
func BenchmarkKafkaPublish(b *testing.B) {
	c := kafkaCluster(b)
	b.Run("impl=client", func(b *testing.B) {
		topic := kafkaTopic(b, c)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		err = fanOut(b.N, func(int) error {
			return cl.ProduceSync(ctx, &kgo.Record{Value: body}).FirstErr()
		})
		rate(b, start)
		if err != nil {
			b.Fatal(err)
		}
	})
	b.Run("impl=sluice", func(b *testing.B) {
		topic := kafkaTopic(b, c)
		pub, err := kafka.NewPublisher(kafka.PublisherConfig[int]{Brokers: c.ListenAddrs(), Topic: topic,
			Record: func(int) (*kgo.Record, error) { return &kgo.Record{Value: body}, nil }})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		publishThrough(b, pub)
		rate(b, start)
	})
}

// cpuMeter reports, beside the rate, the process's CPU time per record
// over the timed region: the broker (kfake) runs in the same process, so
// it counts the cluster's work too, the same for both sides. On a busy
// machine it varies much less than the rate, which counts the time the
// benchmark waited for a core.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

// startCPU starts a cpuMeter.
func startCPU() cpuMeter {
	d, ok := processCPU()
	return cpuMeter{start: d, ok: ok}
}

// report reports the CPU time per record of b since m started.
func (m cpuMeter) report(b *testing.B) {
	if d, ok := processCPU(); ok && m.ok {
		b.ReportMetric(float64((d-m.start).Nanoseconds())/float64(b.N), "cpu-ns/msg")
	}
}

// BenchmarkKafkaConsume consumes b.N records as a member of a consumer
// group, at most kafkaInFlight records held at once, handing each record
// to a function that counts it and committing the offsets of what was
// handled every kafkaInFlight/2 records and at the end. Both sides do
// the whole of it inside the timed region: join the group, poll, hand
// over, commit, and leave the group at the end. The client's baseline
// polls, calls the function on each record in turn, and commits
// synchronously (CommitUncommittedOffsets) once kafkaInFlight/2 records
// were handled since the last commit; the connector's Source runs into a
// pipeline whose ForEach counts, and commits only what settled, from its
// committer while polling goes on. Run it at two -benchtime counts (10 000
// and 100 000) to tell the fixed cost (join, last commit, leave) from the
// cost per record.
func BenchmarkKafkaConsume(b *testing.B) {
	c := kafkaCluster(b)
	b.Run("impl=client", func(b *testing.B) {
		topic := kafkaTopic(b, c)
		kafkaFill(b, c, topic, b.N)
		ctx := context.Background()
		var seen atomic.Int64
		handle := func(context.Context, *kgo.Record) error {
			seen.Add(1)
			return nil
		}
		b.ResetTimer()
		cpu := startCPU()
		start := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			b.Fatal(err)
		}
		handled := 0
		for int(seen.Load()) < b.N {
			fs := cl.PollRecords(ctx, kafkaInFlight)
			if err := fs.Err0(); err != nil {
				b.Fatal(err)
			}
			for r := range fs.RecordsAll() {
				if err := handle(ctx, r); err != nil {
					b.Fatal(err)
				}
				handled++
			}
			if handled >= kafkaInFlight/2 {
				if err := cl.CommitUncommittedOffsets(ctx); err != nil {
					b.Fatal(err)
				}
				handled = 0
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
		cl.Close()
		rate(b, start)
		cpu.report(b)
		if int(seen.Load()) != b.N {
			b.Fatalf("consumed %d records, want %d", seen.Load(), b.N)
		}
	})
	b.Run("impl=channels", func(b *testing.B) {
		topic := kafkaTopic(b, c)
		kafkaFill(b, c, topic, b.N)
		b.ResetTimer()
		cpu := startCPU()
		start := time.Now()
		consumeByChannels(b, c, topic, b.N)
		rate(b, start)
		cpu.report(b)
	})
	b.Run("impl=sluice", func(b *testing.B) {
		topic := kafkaTopic(b, c)
		kafkaFill(b, c, topic, b.N)
		b.ResetTimer()
		cpu := startCPU()
		start := time.Now()
		src, err := kafka.NewSource(kafka.SourceConfig{Brokers: c.ListenAddrs(), Topic: topic, Group: topic, MaxInFlight: kafkaInFlight})
		if err != nil {
			b.Fatal(err)
		}
		consumeThrough(b, src, b.N, src.Stop)
		rate(b, start)
		cpu.report(b)
	})
}

// consumeByChannels is the consume loop a Go team writes by hand when the
// handling must not hold up the polling: a goroutine polls (at most
// kafkaInFlight records at a time) and sends each record over a channel
// of kafkaInFlight to a worker, which handles it, marks it for commit
// once handled, commits what it marked every kafkaInFlight/2 records and
// at the end, and stops the poller after n records. It commits only what
// was handled, as the Source does, and decouples the poll from the
// handling, as a pipeline does; it has no retries, dead letters or
// per-key order across workers.
func consumeByChannels(b *testing.B, c *kfake.Cluster, topic string, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Hour),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	records := make(chan *kgo.Record, kafkaInFlight)
	polled := make(chan error, 1)
	go func() {
		defer close(records)
		for {
			fs := cl.PollRecords(ctx, kafkaInFlight)
			if ctx.Err() != nil {
				polled <- nil
				return
			}
			if err := fs.Err0(); err != nil {
				polled <- err
				return
			}
			for r := range fs.RecordsAll() {
				select {
				case records <- r:
				case <-ctx.Done():
					polled <- nil
					return
				}
			}
		}
	}()
	handle := func(context.Context, *kgo.Record) error { return nil }
	seen, marked := 0, 0
	for r := range records {
		if err := handle(ctx, r); err != nil {
			b.Fatal(err)
		}
		cl.MarkCommitRecords(r)
		seen++
		marked++
		if marked >= kafkaInFlight/2 || seen == n {
			if err := cl.CommitMarkedOffsets(context.Background()); err != nil {
				b.Fatal(err)
			}
			marked = 0
		}
		if seen == n {
			stop()
		}
	}
	if err := <-polled; err != nil {
		b.Fatal(err)
	}
	if seen != n {
		b.Fatalf("consumed %d records, want %d", seen, n)
	}
}
