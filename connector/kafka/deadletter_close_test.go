package kafka_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

// Close waits CloseTimeout for a letter the broker has not answered, not
// the letter's AckTimeout (a minute on a clock that never moves here):
// the Write holds no lock over its wait for the ack. The letter's Write
// then fails as unknown, transient: the broker may store it.
func TestDeadLetterCloseDoesNotWaitForTheAck(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	clock := clockwork.NewFakeClock()
	d, err := kafka.NewDeadLetterPublisher(kafka.DeadLetterConfig{Brokers: c.ListenAddrs(), Topic: topic,
		Clock: clock, AckTimeout: time.Minute, CloseTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx := pubContext(t)
	held, release := holdNthProduce(t, c, 1)
	wrote := make(chan error, 1)
	go func() { wrote <- d.Write(ctx, deadletter.Envelope{CorrelationID: "x", Pipeline: "p"}) }()
	<-held
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the Write waits for its ack")
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	deadline := time.NewTimer(10 * time.Second) // 50 x CloseTimeout
	defer deadline.Stop()
	select {
	case err := <-closed:
		require.Error(t, err, "the letter was still in flight at Close")
	case <-deadline.C:
		release()
		<-closed
		t.Fatal("Close did not end within 50 x CloseTimeout: it waited for the Write's AckTimeout")
	}
	err = <-wrote
	require.Error(t, err)
	assert.Contains(t, err.Error(), "outcome unknown", "the letter may be stored")
	assert.True(t, resilience.Classifier{}.IsTransient(err), "%v", err)
	release()
	err = d.Write(ctx, deadletter.Envelope{CorrelationID: "y", Pipeline: "p"})
	require.Error(t, err, "a Write after Close")
	assert.False(t, resilience.Classifier{}.IsTransient(err), "%v", err)
}

// An AckTimeout under a second, shorter than the client's least delivery
// timeout, passes Validate, and so does NewDeadLetterPublisher: the wait
// for the ack is on the publisher's clock (here one that does not move),
// and a letter is stored.
func TestDeadLetterShortAckTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	cfg := kafka.DeadLetterConfig{Brokers: c.ListenAddrs(), Topic: topic, AckTimeout: 500 * time.Millisecond,
		Clock: clockwork.NewFakeClock()}
	require.NoError(t, cfg.Validate())
	d, err := kafka.NewDeadLetterPublisher(cfg)
	require.NoError(t, err, "Validate passed, so must NewDeadLetterPublisher")
	require.NoError(t, d.Write(pubContext(t), deadletter.Envelope{CorrelationID: "x", Pipeline: "p"}))
	require.NoError(t, d.Close())
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic))
}
