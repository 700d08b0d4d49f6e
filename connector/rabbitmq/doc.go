// Package rabbitmq connects Sluice pipelines to RabbitMQ, with
// github.com/rabbitmq/amqp091-go.
//
//   - [Source] consumes a queue with manual acks and a prefetch limit, and
//     acks each message only when the pipeline is done with it, so a
//     process that dies loses nothing: the broker delivers what was not
//     acked to another consumer of the queue. Many processes consuming one
//     queue are how a Sluice pipeline scales out.
//   - [RetryTopology] is the fourth, outermost resilience layer: the
//     broker's delayed redelivery through a dead-letter exchange and a retry
//     queue with a TTL, for retries that outlive the process and hold no
//     consumer while they wait. [Source.DeadLetter] links it to the
//     pipeline.
//   - [Publisher] is a sink that publishes each item, with publisher
//     confirms, its own retry of publishes that never reached the broker,
//     and mandatory returns reported as permanent errors.
//   - [DeadLetterPublisher] is a dead-letter sink that publishes envelopes
//     as JSON to an exchange.
//
// A minimal consumer with the retry topology:
//
//	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
//		URL: url, Queue: "orders",
//		Declare: &rabbitmq.QueueDeclaration{Durable: true},
//		Retry:   rabbitmq.RetryTopology{Enabled: true, MaxRetry: 5, Delay: time.Minute, Durable: true},
//	})
//	b := pipeline.New("orders",
//		pipeline.WithDeadLetter(src.DeadLetter(dlq)),
//		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
//	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
//		o.NodeRestart.MaxRestarts = 10 // reconnect when the connection is lost
//	}))
//
// Every error of the package starts with "rabbitmq: ". Errors carry the
// pipeline's marks: a lost connection is transient, a refusal by the broker
// (an unknown exchange or queue, a declaration that differs) is permanent.
// The design, the topology and its reasons are in docs/rabbitmq.md.
package rabbitmq
