package kafka_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// keysOnPartitions returns a key for partition 0 and one for partition 1
// of a topic of two partitions, by the client's default partitioner.
func keysOnPartitions(t *testing.T, topic string) (p0, p1 []byte) {
	t.Helper()
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	for i := 0; p0 == nil || p1 == nil; i++ {
		require.Less(t, i, 1000)
		k := []byte(fmt.Sprintf("k%d", i))
		switch part.Partition(&kgo.Record{Key: k}, 2) {
		case 0:
			p0 = k
		case 1:
			p1 = k
		}
	}
	return p0, p1
}

// aloneSetup opens a publisher on a topic of two partitions, led by two
// brokers of c, that takes records of at most 2000 bytes, holds a record ("slow") at the broker on
// partition 0, and Writes a record too large for the topic on partition
// 1: the broker refuses its batch and the Write goes to produce it alone,
// waiting, with every other Write held off, for the slow record. It
// returns the publisher, its clock, the slow and big Writes' results, the
// key of partition 1 and release, which lets the slow record through.
func aloneSetup(t *testing.T, c *kfake.Cluster, topic string) (pub *kafka.Publisher[*kgo.Record], clock *clockwork.FakeClock,
	slow, big <-chan error, key1 []byte, release func()) {
	t.Helper()
	createTopicOn(t, c, topic, 2, "max.message.bytes", "2000")
	// One broker answers one connection's requests in order: the big
	// record's refusal must not queue behind the slow record.
	require.NoError(t, c.MoveTopicPartition(topic, 0, 0))
	require.NoError(t, c.MoveTopicPartition(topic, 1, 1))
	key0, key1 := keysOnPartitions(t, topic)
	clock = clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[*kgo.Record]{Brokers: c.ListenAddrs(), Topic: topic, Clock: clock,
		AckTimeout: 10 * time.Second, CloseTimeout: 200 * time.Millisecond,
		Record: func(r *kgo.Record) (*kgo.Record, error) { return r, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	held, release := holdProduce(t, c)
	slowRes := make(chan error, 1)
	go func() { slowRes <- pub.Write(ctx, &kgo.Record{Key: key0, Value: []byte("slow")}) }()
	<-held
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // slow's ack timer
	value := make([]byte, 5000)
	_, _ = rand.Read(value)
	bigRes := make(chan error, 1)
	go func() { bigRes <- pub.Write(ctx, &kgo.Record{Key: key1, Value: value}) }()
	waitFor(t, "big refused by the broker and waiting to go alone", func() bool {
		select {
		case err := <-bigRes:
			t.Fatalf("big ended before the slow record was released: %v", err)
		default:
		}
		return kafka.PublisherLocked(pub)
	})
	return pub, clock, slowRes, bigRes, key1, release
}

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

// A record waiting to be produced alone holds every other Write off, so
// its wait for the records in flight is bounded by AckTimeout on the
// publisher's clock: past it the Write ends, never sent, and the other
// Writes go on.
func TestPublisherAloneWaitEndsAtAckTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	topic := pubName(t)
	pub, clock, slow, big, key1, release := aloneSetup(t, c, topic)
	ctx := pubContext(t)
	defer pub.Close(ctx)
	other := make(chan error, 1)
	go func() { other <- pub.Write(ctx, &kgo.Record{Key: key1, Value: []byte("other")}) }()
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(bctx, 2), "slow's ack timer and big's wait to go alone, on the clock")

	clock.Advance(10 * time.Second)
	require.ErrorIs(t, <-slow, kafka.ErrOutcomeUnknown, "the held record's Write ends unknown at AckTimeout")
	neverSentAlone(t, <-big)
	var otherErr error
	advanceUntil(t, clock, time.Second, func() bool {
		select {
		case otherErr = <-other:
			return true
		default:
			return false
		}
	})
	require.NoError(t, otherErr, "a Write held off by big goes on once big's wait ended")
	release()
	assert.Len(t, readTopic(t, c.ListenAddrs(), topic, 2, kgo.ReadUncommitted()), 2, "slow and other stored, big not")
	assert.Equal(t, int64(2), countTopic(t, c.ListenAddrs(), topic))
}

// Close cuts the wait of a record to be produced alone instead of waiting
// for it (it holds every other Write and Close off): Close ends within
// CloseTimeout, and the record's Write ends never sent.
func TestPublisherCloseCutsAloneWait(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	topic := pubName(t)
	pub, _, slow, big, _, release := aloneSetup(t, c, topic)
	ctx := pubContext(t)
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(ctx) }()
	deadline := time.NewTimer(3 * time.Second) // 15 x CloseTimeout
	defer deadline.Stop()
	select {
	case err := <-closed:
		require.Error(t, err, "the slow record was still in flight at Close")
	case <-deadline.C:
		release()
		<-closed
		t.Fatal("Close did not end within 15 x CloseTimeout (200 ms)")
	}
	neverSentAlone(t, <-big)
	require.ErrorIs(t, <-slow, kafka.ErrOutcomeUnknown, "the slow record was in flight when the client closed")
	release()
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
