package kafka_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// A Write that began before Close, whose record the client failed as
// never sent (no broker reachable) and which waits for its PubRetry
// delay when Close runs, ends with ErrNotOpen marked permanent and not
// blameless: the item is failed (or dead-lettered) as if it were to
// blame, though its record was never stored and the publisher closed
// under it. The Write did not come after Close ("A Write after Close
// fails with ErrNotOpen, permanent"); common rule: a failure that is not
// the item's fault never counts against it.
//
// Fails deterministically.
func TestPublisherCloseDuringPubRetryIsNeverSent(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	g := &gate{}
	clock := clockwork.NewFakeClock()
	pub := retryPublisher(t, c.ListenAddrs(), topic, g, clock)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	g.Shut()

	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, keyed{Key: "a", Seq: 1}) }()
	// The ack timer exists once the record was handed to the client.
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	// Close flushes: the client fails the record as never sent (a second
	// of DeliveryTimeout), and the Write goes to its PubRetry wait.
	require.NoError(t, pub.Close(ctx))
	var err error
	advanceUntil(t, clock, time.Minute, func() bool {
		select {
		case err = <-res:
			return true
		default:
			return false
		}
	})
	require.Error(t, err)
	t.Logf("Write: %v", err)
	assert.Zero(t, countTopic(t, c.ListenAddrs(), topic), "never stored")
	assert.NotErrorIs(t, err, kafka.ErrOutcomeUnknown, "the record was never sent")
	assert.True(t, resilience.IsBlameless(err), "not the item's fault: %v", err)
	assert.True(t, resilience.IsTransient(err), "transient, as the never-sent produce is with PubRetry off: %v", err)
}
