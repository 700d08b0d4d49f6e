// Package connectortest is the conformance suite of Sluice's broker
// connectors: every connector passes it, and so should a connector of your
// own. A connector's test supplies a [Harness], a handful of methods that
// make a queue, publish to it with the broker's own client, count what it
// holds, and build the connector's source and publisher; [Run] does the
// rest:
//
//	func TestConformance(t *testing.T) {
//		connectortest.Run(t, harness{url: brokerURL(t)}) // skips without a broker
//	}
//
//	func TestMain(m *testing.M) {
//		// The consumer processes of the SIGKILL and crash cases are this
//		// binary run again.
//		connectortest.ChildMain(harness{url: os.Getenv("MY_BROKER_URL")})
//		goleak.VerifyTestMain(m)
//	}
//
// The cases check what a pipeline fed by a broker relies on: a round trip
// keeps bodies and keys; a forced disconnect loses nothing and node restart
// reconnects; a consumer process killed with SIGKILL loses nothing;
// competing consumers share the queue; a permanent failure is dead-lettered
// once; a poison message stops looping; a message that crashes its
// consumer's process is dead-lettered once, and none of its neighbours;
// the broker's retry path redelivers after its delay; a drain finishes and
// acks what was emitted; a cancellation puts back what was not processed;
// settling later messages first settles none before them.
// docs/connectors.md says what each case checks.
//
// Nothing in the suite names a broker's notions: a queue is whatever the
// connector consumes (a RabbitMQ queue, a JetStream stream and its durable
// consumer), and a message is a key, a body and a delivery count.
package connectortest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// A Message is what the suite sees of a connector's message, and what it
// publishes.
type Message struct {
	// Key names the message; the suite gives every message of a queue a
	// different key. A connector carries it in the broker's message id
	// (RabbitMQ's message-id property, JetStream's Nats-Msg-Id header).
	Key string
	// Body is the message's payload, byte for byte.
	Body []byte
	// Delivery is which delivery of the message this is, counting from 1,
	// as the connector knows it: at least one more than the trips the
	// message made through the broker's retry path. The suite checks it
	// only where nothing but that path redelivered the message; 0 when
	// publishing.
	Delivery int
}

// A SourceConfig is what the suite asks of a queue and of the sources
// that consume it. A harness turns it into the connector's own settings.
type SourceConfig struct {
	// Queue names what the source consumes: unique to one case, made of
	// ASCII letters, digits, '-' and '_'.
	Queue string
	// Prefetch is the most messages one source has in flight, delivered
	// and not yet settled; 0 takes the connector's default.
	Prefetch int
	// Retry, when its Delay is positive, is the broker's delayed
	// redelivery of a message whose item failed transiently after the
	// in-process layers gave up.
	Retry Retry
	// MaxDeliveries, when positive, is the poison guard: a message whose
	// item failed the run (its node's failure action said Fail)
	// MaxDeliveries times is not emitted again; the source writes it to
	// the pipeline's dead-letter sink and settles it.
	MaxDeliveries int
	// CrashLedger, when not empty, is the path of the source's crash
	// ledger: a message whose delivery ended the consumer's process is
	// found after at most two crashes, and dead-lettered, with "crashed the
	// consumer" in its reason, at its next delivery.
	CrashLedger string
	// Addr, when not empty, is the host:port the source must dial instead
	// of the broker's address ([Harness.Addr]): a proxy that the suite
	// owns and cuts to force a disconnect.
	Addr string
}

// Retry is the broker's retry path.
type Retry struct {
	// Delay is the wait before each redelivery; 0 turns the path off.
	Delay time.Duration
	// MaxRetries is how many times the broker redelivers one message;
	// MaxRetries = 3 allows 4 deliveries. After the last, the message goes
	// to the pipeline's dead-letter sink.
	MaxRetries int
}

// A Consumer is a connector's source, built for one pipeline, with what
// the pipeline needs to give it.
type Consumer[M any] struct {
	// Source is the connector's source. The suite runs it as a pipeline
	// source, so the engine sees its Open, Close and the other optional
	// interfaces of its dynamic type.
	Source node.Source[M]
	// DeadLetter, when not nil, wraps the pipeline's dead-letter sink
	// (such as RabbitMQ's Source.DeadLetter): how the source learns of a
	// failure that its broker's retry path should take. nil uses the
	// suite's sink as it is.
	DeadLetter func(next deadletter.Sink) deadletter.Sink
}

// A Harness plugs a connector into the suite: M is the type of the items
// its source emits. Its methods are called from parallel subtests, and
// must be safe for that; the methods that take a testing.TB fail it (with
// require) when the broker refuses, and register their cleanups on it.
//
// NewSource, NewPublisher and Message are also called in the consumer
// process of the SIGKILL case (see [ChildMain]), with no test around them.
type Harness[M any] interface {
	// Addr returns the host:port of the broker, where the suite points
	// the proxy of its disconnect case.
	Addr() string
	// CreateQueue makes cfg.Queue (and whatever the connector derives
	// from it: a retry topology, a stream and its durable consumer) ready
	// for sources built with cfg and empty, and deletes all of it when t
	// ends.
	CreateQueue(t testing.TB, cfg SourceConfig)
	// Publish puts msgs into queue with the broker's own client, in
	// order, each with its Key as the message id, and returns once the
	// broker holds them all.
	Publish(t testing.TB, queue string, msgs ...Message)
	// Pending returns how many messages the broker still holds for queue:
	// ready for a consumer, delivered and not yet acked, or waiting for a
	// delayed redelivery. The suite calls it when no source of the queue
	// runs.
	Pending(t testing.TB, queue string) int
	// NewSource returns a source built with cfg, for one pipeline (the
	// suite builds a new one for each pipeline; the poison case runs its
	// pipeline again after each failed run, as a program that calls Run
	// again does, so the source is opened, run and closed more than once).
	NewSource(cfg SourceConfig) (Consumer[M], error)
	// NewPublisher returns the connector's publisher as a sink that
	// publishes each Message to queue, with its Key as the message id, and
	// whose Write returns once the broker holds the message.
	NewPublisher(queue string) (node.Sink[Message], error)
	// Message returns what the suite sees of an item of the source.
	Message(m M) Message
}

// Run checks h's connector against every case, each a parallel subtest
// of t with queues of its own. Run it with -race; a case that waits on the
// broker gives up after [CaseTimeout].
func Run[M any](t *testing.T, h Harness[M]) {
	t.Helper()
	for _, c := range cases[M]() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
	fcs, seed, all := faultCases()
	if all {
		t.Logf("connectortest: the fault mode runs all its %d cases (%s=1)", len(fcs), ChaosEnv)
	} else {
		t.Logf("connectortest: the fault mode runs %d cases that seed %d picks (%s; all of them with %s=1)", len(fcs), seed, FaultSeedEnv, ChaosEnv)
	}
	for _, c := range fcs {
		run := consumeUnderFault[M](c.f)
		if c.publish {
			run = publishUnderFault[M](c.f)
		}
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			run(t, h)
		})
	}
}

// CaseTimeout bounds each case's waits on the broker: a healthy case takes
// a few seconds, and the deadline only turns a hang into a failure.
const CaseTimeout = 2 * time.Minute

// A suiteCase checks one promise of a connector.
type suiteCase[M any] struct {
	name string
	run  func(t testing.TB, h Harness[M])
}

// cases returns the suite's cases, in the order of the docs.
func cases[M any]() []suiteCase[M] {
	return []suiteCase[M]{
		{"RoundTrip", roundTrip[M]},
		{"AtLeastOnceAcrossADisconnect", acrossADisconnect[M]},
		{"KilledConsumerLosesNothing", killedConsumer[M]},
		{"CompetingConsumers", competingConsumers[M]},
		{"PermanentFailureDeadLetteredOnce", permanentFailure[M]},
		{"PoisonMessageDeadLetteredOnce", poisonMessage[M]},
		{"CrashingMessageDeadLetteredOnce", crashedConsumer[M]},
		{"PoisonStormEachMessageEndsOnce", poisonStorm[M]},
		{"BrokerRetryAfterItsDelay", brokerRetry[M]},
		{"DrainFinishesAndAcks", drain[M]},
		{"CancelPutsBackTheRest", cancelPutsBack[M]},
		{"OutOfOrderSettlingKeepsTheUnsettled", outOfOrder[M]},
	}
}
