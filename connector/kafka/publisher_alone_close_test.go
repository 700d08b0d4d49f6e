package kafka_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// Close runs while a record produced alone (its batch was refused as too
// large) is at the broker, unanswered. The Write holds every other Write
// off while it waits for its ack, and Close cuts that wait as it cuts the
// wait before the send: Close ends within CloseTimeout and its context,
// not at the Write's AckTimeout (a minute on a clock that does not move
// here), and the Write ends unknown, transient and blameless: the broker
// may store the record.
func TestPublisherCloseCutsAloneAckWait(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1, "max.message.bytes", "2000")
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[*kgo.Record]{Brokers: c.ListenAddrs(), Topic: topic, Clock: clock,
		AckTimeout: time.Minute, CloseTimeout: 200 * time.Millisecond,
		Record: func(r *kgo.Record) (*kgo.Record, error) { return r, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	held, release := holdNthProduce(t, c, 2) // the first send is refused, the second is the record alone
	value := make([]byte, 5000)
	_, _ = rand.Read(value)
	wrote := make(chan error, 1)
	go func() { wrote <- pub.Write(ctx, &kgo.Record{Key: []byte("k"), Value: value}) }()
	<-held
	require.True(t, kafka.PublisherLocked(pub), "the Write holds every other Write off to produce alone")
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the Write waits for its ack")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(cctx) }()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case err := <-closed:
		require.Error(t, err, "the record was still in flight at Close")
	case <-deadline.C:
		release()
		<-closed
		t.Fatal("Close did not end within 20 s (CloseTimeout 200 ms, its context 5 s): it waited for the alone Write's AckTimeout")
	}
	err = <-wrote
	require.ErrorIs(t, err, kafka.ErrOutcomeUnknown, "sent alone and unanswered: the broker may store it")
	assert.True(t, resilience.IsTransient(err), "%v", err)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
	assert.NotErrorIs(t, err, kafka.ErrNotOpen, "it was sent: not a refusal of a closed publisher")
	assert.Equal(t, int64(1), pub.Unknown())
	release()
}
