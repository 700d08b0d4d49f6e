package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

var errFlakyForB = errors.New("flaky for B only")

// Two sources read one topic in two groups; the pipeline chains their
// sinks, A.DeadLetter(B.DeadLetter(mem)). An item derived from A's record
// (carrying its correlation id) fails with an error A judges permanent and
// B transient. A passes it on; B finds its own record of the same id in
// flight and retries it at its broker: "retried". A's live record is not
// marked as written nowhere: A's partition commits past it. (Found by
// review: it was, and A's partition never committed past it while the
// session lived.) That A's item then counts as B's broker retry, and is
// written nowhere, is the chaining's limit (docs/kafka.md).
func TestChainedSinksRetriedDoesNotStallALiveRecord(t *testing.T) {
	c, a, topic, cfg := closeSetup(t, 1, 3*time.Second)
	_ = c
	cfgA := cfg
	cfgA.Group = topic + ".A"
	cfgA.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}
	cfgB := cfg
	cfgB.Group = topic + ".B"
	cfgB.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{2 * time.Hour},
		Classifier: resilience.Classifier{}.TransientIs(errFlakyForB)}
	a.topic(kafka.TierTopic(topic, time.Hour), 1)
	a.topic(kafka.TierTopic(topic, 2*time.Hour), 1)
	srcA := openSource(t, cfgA)
	srcB := openSource(t, cfgB)
	mem := deadletter.NewMemory(10)
	sink := srcA.DeadLetter(srcB.DeadLetter(mem)).(deadletter.BrokerRetrier)

	eA := &heldAt{hold: map[int]bool{2: true}}
	eB := &heldAt{hold: map[int]bool{2: true}}
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	ranA, ranB := make(chan error, 1), make(chan error, 1)
	go func() { ranA <- srcA.Run(ctx, eA) }()
	go func() { ranB <- srcB.Run(ctx, eB) }()
	waitFor(t, "A emitted three", func() bool { return eA.count() == 3 })
	waitFor(t, "B emitted three", func() bool { return eB.count() == 3 })

	id := eA.item(0).(kafka.Message).CorrelationID()
	env := deadletter.Envelope{Item: "derived from A's record", CorrelationID: id, Err: errFlakyForB, Attempts: 1}
	retried, err := sink.WriteOrRetry(testContext(t), env)
	require.NoError(t, err)
	eA.settle(0, 1, node.DeadLettered)
	// A's third record was delivered at emit; commits are due at once (CommitEvery 1).
	waitWithin(t, 10*time.Second, func() bool {
		return assert.ObjectsAreEqual(map[int32]int64{0: 3}, a.committed(cfgA.Group, topic))
	}, func() string {
		return fmt.Sprintf("A's partition stalls: committed %v (retried %v, letters %d)", a.committed(cfgA.Group, topic), retried, mem.Len())
	})
	srcA.Stop()
	srcB.Stop()
	<-ranA
	<-ranB
	eB.settle(0, 1, node.Delivered)
	require.NoError(t, srcA.Close(testContext(t)))
	require.NoError(t, srcB.Close(testContext(t)))
}
