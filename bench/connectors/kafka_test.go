package connectors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// The Kafka benchmarks run on a kfake cluster in the benchmark's process
// (no broker is needed), the same one for the client's baseline and the
// connector in each run: its CPU cost is the same for both sides.

// kafkaInFlight is the most records a consumer holds: polled at once by
// the client's baseline, and MaxInFlight of the connector's Source (which
// counts the records settled and not yet committed too, so that it
// commits every kafkaInFlight/2 records).
const kafkaInFlight = 1024

// partitionsInFlight is the MaxInFlight of the Source sides that run
// beside the goroutine per partition (consumeByPartitions), whose poller
// runs ahead of its workers by up to six polls per partition (four
// queued, one in the worker's hands, one in the poller's send): it holds
// up to about 10 000 records polled and not handled (its max-held
// metric, at 1 000 000 records). With kafkaInFlight the Source would
// hold a tenth of that: its workers would wait for polls the baseline's
// do not wait for. Every Source side polls at most kafkaInFlight records
// at once (MaxPollRecords), as the baseline does, so that a batch of
// Batches is no larger than a partition's share of the baseline's poll.
const partitionsInFlight = 8192

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

// kafkaFill produces n records to topic, record(i) the i-th, untimed,
// for a consume benchmark.
func kafkaFill(b *testing.B, c *kfake.Cluster, topic string, n int, record func(i int) *kgo.Record) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	for i := range n {
		cl.Produce(context.Background(), record(i), func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// BenchmarkKafkaPublish produces b.N records, each waiting for its ack
// (acks=all, idempotent), publishers at once: the client's ProduceSync,
// and the connector's Publisher under Parallel; impl=client-sink is the
// client's ProduceSync as the sink function of the Publisher's pipeline,
// which tells the engine's share of the cost from the Publisher's. Each
// side does the whole of it inside the timed region, as a program does:
// start its client, produce, and close the client (the Publisher's Open
// and Close, in the pipeline's Run).
func BenchmarkKafkaPublish(b *testing.B) {
	syncProduce := func(cl *kgo.Client) error {
		return cl.ProduceSync(context.Background(), &kgo.Record{Value: body}).FirstErr()
	}
	b.Run("impl=client", func(b *testing.B) {
		clientPublishSide(b, func(cl *kgo.Client) error {
			return fanOut(b.N, func(int) error { return syncProduce(cl) })
		})
	})
	b.Run("impl=client-sink", func(b *testing.B) {
		clientPublishSide(b, func(cl *kgo.Client) error {
			publishThrough(b, node.SinkFunc[int](func(context.Context, int) error { return syncProduce(cl) }))
			return nil
		})
	})
	b.Run("impl=sluice", func(b *testing.B) {
		c := kafkaCluster(b)
		topic := kafkaTopic(b, c)
		pub, err := kafka.NewPublisher(kafka.PublisherConfig[int]{Brokers: c.ListenAddrs(), Topic: topic,
			Record: func(int) (*kgo.Record, error) { return &kgo.Record{Value: body}, nil }})
		if err != nil {
			b.Fatal(err)
		}
		reqs := countProduces(c)
		runtime.GC()
		b.ResetTimer()
		cpu := startCPU()
		start := time.Now()
		publishThrough(b, pub)
		rate(b, start)
		cpu.report(b)
		b.ReportMetric(float64(b.N)/float64(max(reqs.Load(), 1)), "msgs/req")
	})
}

// clientPublishSide times a publish side of the bare client on a cluster
// of its own: it starts the client (acks=all, idempotent, no linger),
// has publish produce b.N records on it, and closes it, all inside the
// timed region.
func clientPublishSide(b *testing.B, publish func(cl *kgo.Client) error) {
	c := kafkaCluster(b)
	topic := kafkaTopic(b, c)
	reqs := countProduces(c)
	runtime.GC()
	b.ResetTimer()
	cpu := startCPU()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	err = publish(cl)
	cl.Close()
	rate(b, start)
	cpu.report(b)
	b.ReportMetric(float64(b.N)/float64(max(reqs.Load(), 1)), "msgs/req")
	if err != nil {
		b.Fatal(err)
	}
}

// countProduces counts, from now on, the produce requests c is sent
// (each side of BenchmarkKafkaPublish on a cluster of its own): the
// records per request say how well a side's produces were batched, which
// the CPU per record follows (a request costs a write and a read on
// each end of its socket).
func countProduces(c *kfake.Cluster) *atomic.Int64 {
	var n atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
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
// to a function that does nothing and committing the offsets of what was
// handled every kafkaInFlight/2 records and at the end: the cost of the
// consuming alone. Every side does the whole of it inside the timed
// region: join the group, poll, hand over, commit, and leave the group
// at the end. impl=client polls, calls the function on each record in
// turn, and commits synchronously (CommitUncommittedOffsets) once
// kafkaInFlight/2 records were handled since the last commit;
// impl=channels is consumeByChannels; impl=sluice runs the connector's
// Source into a pipeline whose ForEach calls the function, and commits
// only what settled, from its committer while polling goes on. Run it at
// two -benchtime counts (10 000 and 100 000) to tell the fixed cost
// (join, last commit, leave) from the cost per record.
func BenchmarkKafkaConsume(b *testing.B) {
	nothing := func([]byte) error { return nil }
	fill := func(int) *kgo.Record { return &kgo.Record{Value: body} }
	b.Run("impl=client", func(b *testing.B) {
		consumeSide(b, fill, func(c *kfake.Cluster, topic string) { consumeByClient(b, c, topic, b.N, nothing) })
	})
	b.Run("impl=channels", func(b *testing.B) {
		consumeSide(b, fill, func(c *kfake.Cluster, topic string) { consumeByChannels(b, c, topic, b.N, nothing) })
	})
	b.Run("impl=sluice", func(b *testing.B) {
		consumeSide(b, fill, func(c *kfake.Cluster, topic string) { consumeBySource(b, c, topic, b.N, kafkaInFlight, nothing) })
	})
}

// BenchmarkKafkaConsumeDecode is BenchmarkKafkaConsume with the least
// work a real consumer does: each record is an order of about 100 bytes
// of JSON, keyed by one of 64 customers, and the function decodes it
// (encoding/json) and checks it. The client and the hand-written
// channels handle records one at a time, as written in
// BenchmarkKafkaConsume; impl=sluice has one ForEach worker too, and
// impl=sluice-keyed is the shape docs/kafka.md shows, the ForEach
// under pipeline.Keyed(2, kafka.RecordKey): two workers, one customer's
// records in order. impl=sluice-parallel is the ForEach under
// Parallel(2) and Unordered, for the cost of Keyed's order beside plain
// parallel work. impl=sluice-batches is the shape of the goroutine per
// partition (impl=partitions) in the pipeline: the source's Batches, a
// partition's records of a poll per item, under Keyed(2, kafka.BatchKey).
// The three run beside impl=partitions with MaxInFlight
// partitionsInFlight; impl=sluice, beside impl=client, with
// kafkaInFlight.
func BenchmarkKafkaConsumeDecode(b *testing.B) {
	b.Run("impl=client", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) { consumeByClient(b, c, topic, b.N, decodeOrder) })
	})
	b.Run("impl=channels", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) { consumeByChannels(b, c, topic, b.N, decodeOrder) })
	})
	b.Run("impl=sluice", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) { consumeBySource(b, c, topic, b.N, kafkaInFlight, decodeOrder) })
	})
	b.Run("impl=partitions", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) { consumeByPartitions(b, c, topic, b.N, decodeOrder) })
	})
	b.Run("impl=sluice-parallel", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) {
			consumeBySource(b, c, topic, b.N, partitionsInFlight, decodeOrder, pipeline.Parallel(2), pipeline.Unordered())
		})
	})
	b.Run("impl=sluice-keyed", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) {
			consumeBySource(b, c, topic, b.N, partitionsInFlight, decodeOrder, pipeline.Keyed(2, kafka.RecordKey))
		})
	})
	b.Run("impl=sluice-batches", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) {
			consumeByBatches(b, c, topic, b.N, partitionsInFlight, decodeOrder, pipeline.Keyed(2, kafka.BatchKey))
		})
	})
}

// BenchmarkKafkaConsumeDecodeFlaky is BenchmarkKafkaConsumeDecode's
// parallel sides beside a flaky store: the first handling of one order
// in every flakyEvery (by its id) fails with a transient error, and the
// next succeeds. The goroutine per partition retries the record in place
// at once (impl=partitions); the pipeline's sides retry the item at once
// (item retry, no backoff, flakyRetries retries): under Keyed(2,
// kafka.RecordKey) the record (impl=sluice-keyed), under Keyed(2,
// kafka.BatchKey) the whole batch (impl=sluice-batches), whose records
// before the failed one are handled again, and which fails once for each
// flaky record it holds (a batch of 1 800 records holds about two). Compare each with BenchmarkKafkaConsumeDecode's
// side of the same name for the price of the failures.
func BenchmarkKafkaConsumeDecodeFlaky(b *testing.B) {
	retry := pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry = resilience.ItemRetryOptions{MaxRetries: flakyRetries}
	})
	b.Run("impl=partitions", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) {
			handle := flakyOrders(b.N)
			consumeByPartitions(b, c, topic, b.N, func(v []byte) error {
				err := handle(v)
				for i := 0; i < flakyRetries && err != nil; i++ {
					err = handle(v)
				}
				return err
			})
		})
	})
	b.Run("impl=sluice-keyed", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) {
			consumeBySource(b, c, topic, b.N, partitionsInFlight, flakyOrders(b.N), pipeline.Keyed(2, kafka.RecordKey), retry)
		})
	})
	b.Run("impl=sluice-batches", func(b *testing.B) {
		consumeSide(b, orderRecord, func(c *kfake.Cluster, topic string) {
			consumeByBatches(b, c, topic, b.N, partitionsInFlight, flakyOrders(b.N), pipeline.Keyed(2, kafka.BatchKey), retry)
		})
	})
}

// flakyEvery is how many orders of BenchmarkKafkaConsumeDecodeFlaky
// share one failure; flakyRetries is how many retries each side makes.
const (
	flakyEvery   = 1000
	flakyRetries = 20
)

// errFlakyStore is the flaky store's failure, transient.
var errFlakyStore = resilience.MarkTransient(errors.New("store: connection reset"))

// flakyOrders returns decodeOrder for n orders, whose first handling of
// each order with an id of 7 modulo flakyEvery fails with errFlakyStore.
func flakyOrders(n int) func([]byte) error {
	tried := make([]atomic.Bool, n)
	return func(value []byte) error {
		var o order
		if err := json.Unmarshal(value, &o); err != nil {
			return err
		}
		if o.Customer == "" || o.AmountCents <= 0 || len(o.Items) != 2 {
			return fmt.Errorf("order %d: bad decode: %+v", o.ID, o)
		}
		if o.ID%flakyEvery == 7 && o.ID < int64(n) && !tried[o.ID].Swap(true) {
			return errFlakyStore
		}
		return nil
	}
}

// BenchmarkDecodeWork is the work of BenchmarkKafkaConsumeDecode alone:
// decodeOrder on the values of orderRecord, in turn, with no Kafka and
// no goroutine but the benchmark's: the cost of the work in the same
// run as the consume benchmarks, whose cost per record less this one is
// what each side adds to it.
func BenchmarkDecodeWork(b *testing.B) {
	values := make([][]byte, 1024)
	for i := range values {
		values[i] = orderRecord(i).Value
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if err := decodeOrder(values[i%len(values)]); err != nil {
			b.Fatal(err)
		}
	}
	rate(b, start)
}

// consumeByPartitions is franz-go alone handling records in parallel the
// way its own examples do, a goroutine per partition: the poller sends
// each partition's records of a poll (at most kafkaInFlight in all) to
// that partition's worker over a channel of four batches; the worker
// handles them in order and marks them for commit (MarkCommitRecords,
// with AutoCommitMarks); the poller commits what was marked
// (CommitMarkedOffsets) once kafkaInFlight/2 records were handled since
// the last commit, and at the end. Order is kept per partition, not per
// key, and a partition's records are handled by its one worker however
// many partitions share a key's load.
func consumeByPartitions(b *testing.B, c *kfake.Cluster, topic string, n int, handle func([]byte) error) {
	b.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Hour),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var (
		handled  atomic.Int64 // records handled in all
		failed   atomic.Pointer[error]
		wg       sync.WaitGroup
		partOf   = map[int32]chan []*kgo.Record{}
		polled   int
		lastMark int64
		maxHeld  int64 // the most records polled and not handled
	)
	worker := func(in <-chan []*kgo.Record) {
		for recs := range in {
			for _, r := range recs {
				if err := handle(r.Value); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
			cl.MarkCommitRecords(recs...)
			handled.Add(int64(len(recs)))
		}
	}
	for polled < n {
		fs := cl.PollRecords(ctx, kafkaInFlight)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			in, ok := partOf[p.Partition]
			if !ok {
				in = make(chan []*kgo.Record, 4)
				partOf[p.Partition] = in
				wg.Go(func() { worker(in) })
			}
			in <- p.Records
			polled += len(p.Records)
			maxHeld = max(maxHeld, int64(polled)-handled.Load())
		})
		if h := handled.Load(); h-lastMark >= kafkaInFlight/2 {
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
			lastMark = h
		}
	}
	for _, in := range partOf {
		close(in)
	}
	wg.Wait()
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		b.Fatal(err)
	}
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	if got := handled.Load(); got != int64(n) || polled != n {
		b.Fatalf("polled %d records and handled %d, want %d", polled, got, n)
	}
	b.ReportMetric(float64(maxHeld), "max-held")
}

// warmUp runs once in a process, before its first consume side is
// timed; warmRecords is how many records it consumes.
var warmUp sync.Once

const warmRecords = 100_000

// consumeSide starts a cluster of its own and fills a new topic on it
// with b.N records made by fill, untimed, then times consume(cluster,
// topic) and reports the rate and the CPU per record. Each side has a
// cluster of its own and starts after a collection, and the first side
// of a process after an untimed run of the bare loop: the same client
// loop run five times in turn in one process, on one shared cluster, ran
// faster the later it came (the fifth at 1.30 to 1.40 times the first's
// rate, 0.73 of its CPU per record), and with a cluster per side the
// first still ran at 0.85 of the others: the heap's memory was new to
// the process, and the records earlier sides left made the heap larger
// and the collector run less often. Sides compared across processes
// (pairs.sh) are not moved by either.
func consumeSide(b *testing.B, fill func(i int) *kgo.Record, consume func(c *kfake.Cluster, topic string)) {
	warmUp.Do(func() {
		c := kafkaCluster(b)
		topic := kafkaTopic(b, c)
		kafkaFill(b, c, topic, warmRecords, orderRecord)
		consumeByClient(b, c, topic, warmRecords, decodeOrder)
	})
	c := kafkaCluster(b)
	topic := kafkaTopic(b, c)
	kafkaFill(b, c, topic, b.N, fill)
	storeLastOffsets(b, c, topic)
	runtime.GC()
	b.ResetTimer()
	cpu := startCPU()
	start := time.Now()
	consume(c, topic)
	rate(b, start)
	cpu.report(b)
}

// order is the record BenchmarkKafkaConsumeDecode's function decodes.
type order struct {
	ID          int64  `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
	Items       []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"items"`
}

// orderRecord is the i-th record of BenchmarkKafkaConsumeDecode: an
// order keyed by its customer, one of 64.
func orderRecord(i int) *kgo.Record {
	customer := fmt.Sprintf("c-%03d", i%64)
	value := fmt.Sprintf(`{"id":%d,"customer":%q,"amount_cents":%d,"items":[{"sku":"A-%d","qty":2},{"sku":"B-%d","qty":1}]}`,
		i, customer, 1000+i%9000, i%97, i%89)
	return &kgo.Record{Key: []byte(customer), Value: []byte(value)}
}

// decodeOrder decodes an order and checks it, the work of
// BenchmarkKafkaConsumeDecode.
func decodeOrder(value []byte) error {
	var o order
	if err := json.Unmarshal(value, &o); err != nil {
		return err
	}
	if o.Customer == "" || o.AmountCents <= 0 || len(o.Items) != 2 {
		return fmt.Errorf("order %d: bad decode: %+v", o.ID, o)
	}
	return nil
}

// consumeByClient is franz-go alone: it polls (at most kafkaInFlight
// records), calls handle on each record in turn, and commits
// synchronously (CommitUncommittedOffsets) once kafkaInFlight/2 records
// were handled since the last commit and at the end.
func consumeByClient(b *testing.B, c *kfake.Cluster, topic string, n int, handle func([]byte) error) {
	b.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	seen, handled := 0, 0
	for seen < n {
		fs := cl.PollRecords(ctx, kafkaInFlight)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		for r := range fs.RecordsAll() {
			if err := handle(r.Value); err != nil {
				b.Fatal(err)
			}
			seen++
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
	if seen != n {
		b.Fatalf("consumed %d records, want %d", seen, n)
	}
}

// consumeBySource runs the connector's Source (MaxInFlight depth, so
// CommitEvery depth/2, and polls of at most kafkaInFlight) into a
// pipeline whose
// ForEach, under opts, calls handle on each record, until n records were
// handled. The ForEach stops the source once it handled the last record
// of every partition (lastOffsets, read before the timed region): the
// records before it were polled before it, and the drain that follows
// Stop handles them. So the workers share no count per record (an atomic
// every record added to, contended by two workers, cost the parallel
// sides about 0.08 us per record of CPU, where the goroutine per
// partition adds a batch's count at once); the run's counts then say
// that n records were handled in all (a count, which a record skipped
// and another handled twice would pass; the connector's tests check each
// record).
func consumeBySource(b *testing.B, c *kfake.Cluster, topic string, n, depth int, handle func([]byte) error, opts ...pipeline.NodeOption) {
	b.Helper()
	last := lastOffsets(topic)
	src, err := kafka.NewSource(kafka.SourceConfig{Brokers: c.ListenAddrs(), Topic: topic, Group: topic, MaxInFlight: depth,
		MaxPollRecords: kafkaInFlight})
	if err != nil {
		b.Fatal(err)
	}
	left := partitionsLeft(last)
	p := pipeline.New("consume")
	pipeline.ForEach(p, "handle", pipeline.Source(p, "consume", src), func(_ context.Context, m kafka.Message) error {
		if err := handle(m.Value); err != nil {
			return err
		}
		if int(m.Partition) < len(last) && m.Offset == last[m.Partition] && left.Add(-1) == 0 {
			src.Stop()
		}
		return nil
	}, opts...)
	if s := runHandle(b, p); s.In != int64(n) || s.Out != int64(n) {
		b.Fatalf("the ForEach took %d records and handled %d, want %d", s.In, s.Out, n)
	}
}

// consumeByBatches is consumeBySource with the source's Batches: the
// ForEach gets a partition's records of a poll in one call and handles
// them in turn, as consumeByPartitions's workers do. It reports the
// records per batch.
func consumeByBatches(b *testing.B, c *kfake.Cluster, topic string, n, depth int, handle func([]byte) error, opts ...pipeline.NodeOption) {
	b.Helper()
	last := lastOffsets(topic)
	src, err := kafka.NewSource(kafka.SourceConfig{Brokers: c.ListenAddrs(), Topic: topic, Group: topic, MaxInFlight: depth,
		MaxPollRecords: kafkaInFlight})
	if err != nil {
		b.Fatal(err)
	}
	left := partitionsLeft(last)
	var handled atomic.Int64
	p := pipeline.New("consume")
	pipeline.ForEach(p, "handle", pipeline.Source(p, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		for _, m := range ms {
			if err := handle(m.Value); err != nil {
				return err
			}
		}
		handled.Add(int64(len(ms)))
		m := ms[len(ms)-1]
		if int(m.Partition) < len(last) && m.Offset == last[m.Partition] && left.Add(-1) == 0 {
			src.Stop()
		}
		return nil
	}, opts...)
	if s := runHandle(b, p); s.In != s.Out || handled.Load() != int64(n) {
		b.Fatalf("the ForEach took %d batches and handled %d, with %d records, want %d", s.In, s.Out, handled.Load(), n)
	} else {
		b.ReportMetric(float64(n)/float64(s.In), "msgs/batch")
	}
}

// partitionsLeft returns a count of the partitions of last that hold
// records, which a consume side counts down as it handles each one's
// last record.
func partitionsLeft(last []int64) *atomic.Int64 {
	var left atomic.Int64
	for _, o := range last {
		if o >= 0 {
			left.Add(1)
		}
	}
	return &left
}

// runHandle builds p, runs it (within five minutes) and returns the
// counts of its node "handle".
func runHandle(b *testing.B, p *pipeline.Builder) pipeline.NodeStats {
	b.Helper()
	pl, err := p.Build()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := pl.Run(ctx)
	if err != nil {
		b.Fatal(err)
	}
	i := slices.IndexFunc(res.Nodes, func(s pipeline.NodeStats) bool { return s.Node == "handle" })
	if i < 0 {
		b.Fatal("no counts of the ForEach")
	}
	return res.Nodes[i]
}

// kafkaLast holds, per topic a consume side filled, the offset of the
// last record of each partition, -1 for a partition without records:
// read by consumeSide before its timed region.
var kafkaLast sync.Map // topic -> []int64

// lastOffsets returns what consumeSide stored in kafkaLast for topic.
func lastOffsets(topic string) []int64 {
	v, ok := kafkaLast.Load(topic)
	if !ok {
		panic("lastOffsets: the topic was not filled by consumeSide")
	}
	return v.([]int64)
}

// storeLastOffsets reads the end offsets of topic's partitions and
// stores the last record's offset of each in kafkaLast.
func storeLastOffsets(b *testing.B, c *kfake.Cluster, topic string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		b.Fatal(err)
	}
	if err := ends.Error(); err != nil {
		b.Fatal(err)
	}
	var last []int64
	ends.Each(func(o kadm.ListedOffset) {
		for int(o.Partition) >= len(last) {
			last = append(last, -1)
		}
		last[o.Partition] = o.Offset - 1
	})
	kafkaLast.Store(topic, last)
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
func consumeByChannels(b *testing.B, c *kfake.Cluster, topic string, n int, handle func([]byte) error) {
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
	seen, marked := 0, 0
	for r := range records {
		if err := handle(r.Value); err != nil {
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
