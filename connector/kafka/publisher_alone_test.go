package kafka_test

import (
	"crypto/rand"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// neverSentAlone asserts that err is a record's that was never stored
// because it could not be produced alone: transient, blameless, neither
// unknown nor too large.
func neverSentAlone(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	assert.True(t, resilience.IsTransient(err), "worth another try: %v", err)
	assert.True(t, resilience.IsBlameless(err), "not the item's fault: %v", err)
	assert.NotErrorIs(t, err, kafka.ErrOutcomeUnknown, "it was never sent alone")
	assert.NotErrorIs(t, err, kafka.ErrRecordTooLarge, "it was never refused alone")
}

// Close runs while a batch that mixes a record too large for the topic
// with a small one is in flight. The broker refuses the batch, storing
// none of it; the small record's Write goes to produce it alone and finds
// the publisher closed: never stored for its neighbour's sake, so
// transient and blameless, not ErrNotOpen's permanent failure.
func TestPublisherCloseBeforeRefusedBatchGoesAlone(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1, "max.message.bytes", "2000")
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic, Clock: clock,
		Record: func(v []byte) (*kgo.Record, error) { return &kgo.Record{Key: []byte("k"), Value: v}, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	held, release := holdProduce(t, c)
	first := make(chan error, 1)
	go func() { first <- pub.Write(ctx, []byte("first")) }()
	<-held
	big := make([]byte, 5000)
	_, _ = rand.Read(big)
	bigRes, smallRes := make(chan error, 1), make(chan error, 1)
	go func() { bigRes <- pub.Write(ctx, big) }()
	go func() { smallRes <- pub.Write(ctx, []byte("small")) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 3)) // the three ack timers: all handed to the client
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(ctx) }()
	waitFor(t, "Close under way", func() bool { return kafka.PublisherClosed(pub) })
	release()
	require.NoError(t, <-first)
	neverSentAlone(t, <-smallRes)
	neverSentAlone(t, <-bigRes)
	require.NoError(t, <-closed)
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic), "only first stored")
}
