// Package nats connects Sluice pipelines to NATS JetStream, with
// github.com/nats-io/nats.go and its jetstream package. It needs a server
// with JetStream, version 2.9 or later.
//
//   - [Source] consumes a stream through a durable pull consumer with
//     explicit acks, and settles each message only when the pipeline is
//     done with it: an ack for Delivered, Filtered and Skipped, a
//     termination for a dead-lettered item, a negative ack for the rest, so
//     a process that dies loses nothing: the server delivers what was not
//     acked to another process of the same consumer after AckWait. Many
//     processes pulling from one durable consumer are how a Sluice
//     pipeline scales out.
//   - [BrokerRetry] is the fourth, outermost resilience layer: the
//     server's delayed redelivery (a negative ack with a delay), bounded by
//     the consumer's MaxDeliver, for retries that outlive the process and
//     hold no worker while they wait. [Source.DeadLetter] links it to the
//     pipeline; HandOffAfter hands long in-process waits to it.
//   - [Publisher] is a sink that publishes each item and waits for the
//     stream's PubAck, with a Nats-Msg-Id from the item's key so that the
//     stream's duplicate window absorbs republishes, and its own retry of
//     publishes that never reached the server.
//   - [DeadLetterPublisher] is a dead-letter sink that publishes envelopes
//     as JSON to a subject.
//
// A minimal consumer with the broker's retry:
//
//	src, err := nats.NewSource(nats.SourceConfig{
//		URL: url, Stream: "ORDERS", Consumer: "billing",
//		Declare:    &nats.StreamDeclaration{Subjects: []string{"orders.>"}},
//		MaxDeliver: 5, BackOff: []time.Duration{time.Second, 10 * time.Second, time.Minute},
//		Retry:      nats.BrokerRetry{Enabled: true},
//	})
//	b := pipeline.New("orders",
//		pipeline.WithDeadLetter(src.DeadLetter(dlq)),
//		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
//	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
//		o.NodeRestart.MaxRestarts = 10 // reconnect when the connection is lost
//	}))
//
// Every error of the package starts with "nats: ". Errors carry the
// pipeline's marks: a lost connection is transient, a refusal by the
// server (a missing stream, a consumer whose settings differ) is permanent.
// The design and its reasons are in docs/nats.md.
package nats
