// Package kafka connects Sluice pipelines to Apache Kafka, with
// github.com/twmb/franz-go.
//
//   - [Source] consumes a topic as a member of a consumer group, and
//     commits a record's offset only once the pipeline is done with it and
//     with every record before it in its partition: a process that dies
//     loses nothing, the partition's next owner reads again what was not
//     committed. Many processes in one group are how a Sluice pipeline
//     scales out, up to one per partition.
//
// A minimal consumer, with per-key order:
//
//	src, err := kafka.NewSource(kafka.SourceConfig{
//		Brokers: []string{"127.0.0.1:9092"}, Topic: "orders", Group: "billing",
//	})
//	b := pipeline.New("orders")
//	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
//		o.NodeRestart.MaxRestarts = 10 // rejoin when the cluster was lost
//	}))
//	pipeline.Sink(b, "store", msgs, store, pipeline.Keyed(8, kafka.RecordKey))
//
// Every error of the package starts with "kafka: ". Errors carry the
// pipeline's marks: a cluster that cannot be reached is transient, a
// refusal by a broker (an unknown topic, an authorization failure) is
// permanent. The design and its reasons are in docs/kafka.md.
package kafka
