package kafka_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A keyed is one item to publish: its key and its place among the items of
// that key.
type keyed struct {
	Key string
	Seq int
}

func keyedRecord(k keyed) (*kgo.Record, error) {
	return &kgo.Record{Key: []byte(k.Key), Value: []byte(strconv.Itoa(k.Seq))}, nil
}

// keyedItems returns n items of each of keys keys, interleaved.
func keyedItems(keys, n int) []keyed {
	var out []keyed
	for i := range n {
		for k := range keys {
			out = append(out, keyed{Key: fmt.Sprintf("k%02d", k), Seq: i})
		}
	}
	return out
}

// checkKeyOrder asserts that recs hold every item of keyedItems(keys, n)
// once, each key on one partition, in order.
func checkKeyOrder(t *testing.T, recs []*kgo.Record, keys, n int) {
	t.Helper()
	require.Len(t, recs, keys*n)
	seen := map[string][]int{}
	part := map[string]int32{}
	for _, r := range recs {
		k := string(r.Key)
		if p, ok := part[k]; ok {
			assert.Equal(t, p, r.Partition, "key %s on one partition", k)
		}
		part[k] = r.Partition
		seq, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		seen[k] = append(seen[k], seq)
	}
	require.Len(t, seen, keys)
	for k, seqs := range seen {
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, seqs, "key %s: each once, in order", k)
	}
}

// publishAll runs items through a pipeline that maps them under
// Parallel(8), ordered, and writes them with pub Keyed by the key, four
// at once.
func publishAll(t *testing.T, ctx context.Context, pub *kafka.Publisher[keyed], items []keyed) {
	t.Helper()
	b := pipeline.New("publish")
	in := pipeline.Source(b, "items", pipelinetest.NewSliceSource(items...))
	mapped := pipeline.Map(b, "map", in, func(_ context.Context, k keyed) (keyed, error) { return k, nil }, pipeline.Parallel(8))
	pipeline.Sink(b, "publish", mapped, pub, pipeline.Keyed(4, func(k keyed) string { return k.Key }))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.NoError(t, err)
}

// Records of one key land on one partition in the order of their items,
// each once, under a Parallel transform and a Keyed sink.
func TestPublisherKeyOrder(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 4)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic, Record: keyedRecord})
	require.NoError(t, err)
	publishAll(t, pubContext(t), pub, keyedItems(12, 30))
	checkKeyOrder(t, readTopic(t, c.ListenAddrs(), topic, 12*30, kgo.ReadUncommitted()), 12, 30)
	assert.Zero(t, pub.Unknown())
}

// A record without key and one with an empty key are both stored: the
// first keeps no key, the second an empty one, and the record's own Topic
// wins over the config's.
func TestPublisherNilAndEmptyKey(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic, other := pubName(t), pubName(t)
	createTopicOn(t, c, topic, 2)
	createTopicOn(t, c, other, 1)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic,
		Record: func(key []byte) (*kgo.Record, error) {
			if string(key) == "elsewhere" {
				return &kgo.Record{Topic: other, Key: key, Value: []byte("v")}, nil
			}
			return &kgo.Record{Key: key, Value: []byte("v")}, nil
		}})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	require.NoError(t, pub.Write(ctx, nil))
	require.NoError(t, pub.Write(ctx, []byte{}))
	require.NoError(t, pub.Write(ctx, []byte("elsewhere")))

	recs := readTopic(t, c.ListenAddrs(), topic, 2, kgo.ReadUncommitted())
	require.Len(t, recs, 2)
	var nilKeys, emptyKeys int
	for _, r := range recs {
		if r.Key == nil {
			nilKeys++
		} else if len(r.Key) == 0 {
			emptyKeys++
		}
	}
	assert.Equal(t, 1, nilKeys, "the record without key has none")
	assert.Equal(t, 1, emptyKeys, "the empty key stays an empty key")
	assert.Len(t, readTopic(t, c.ListenAddrs(), other, 1, kgo.ReadUncommitted()), 1)
}

// A record above MaxRecordBytes is refused before it is sent, permanently,
// with an error naming the setting; one of exactly MaxRecordBytes is
// stored. A record the topic's own limit refuses fails the same way.
func TestPublisherRecordTooLarge(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic, small := pubName(t), pubName(t)
	createTopicOn(t, c, topic, 1)
	createTopicOn(t, c, small, 1, "max.message.bytes", "2000")
	newPub := func(topic string, max int) *kafka.Publisher[[]byte] {
		pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic, MaxRecordBytes: max,
			Record: func(v []byte) (*kgo.Record, error) { return &kgo.Record{Key: []byte("k"), Value: v}, nil }})
		require.NoError(t, err)
		return pub
	}
	ctx := pubContext(t)
	pub := newPub(topic, 1000)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)

	err := pub.Write(ctx, make([]byte, 1000))
	require.ErrorIs(t, err, kafka.ErrRecordTooLarge)
	assert.Contains(t, err.Error(), "MaxRecordBytes (1000)")
	assert.Contains(t, err.Error(), topic)
	assert.False(t, resilience.IsTransient(err), "permanent")
	assert.NotErrorIs(t, err, kafka.ErrOutcomeUnknown)
	require.NoError(t, pub.Write(ctx, make([]byte, 999)), "key and value of exactly MaxRecordBytes")

	broker := newPub(small, 0)
	require.NoError(t, broker.Open(ctx))
	defer broker.Close(ctx)
	big := make([]byte, 5000)
	_, _ = rand.Read(big) // incompressible, so that the batch stays large
	err = broker.Write(ctx, big)
	require.ErrorIs(t, err, kafka.ErrRecordTooLarge, "the topic's max.message.bytes")
	assert.False(t, resilience.IsTransient(err), "permanent")
	require.NoError(t, broker.Write(ctx, make([]byte, 100)))
	assert.Len(t, readTopic(t, c.ListenAddrs(), topic, 1, kgo.ReadUncommitted()), 1)
}

// holdProduce makes c, a test's own cluster, hold the first produce
// request it gets until release is called; held is closed once it
// arrived. (A request may name its topic by id only, so it is not matched
// by name.) When t ends, the request is released and its handling waited
// for before the cluster closes: a cluster closed while it wakes a held
// request can leave a goroutine behind.
func holdProduce(t *testing.T, c *kfake.Cluster) (held <-chan struct{}, release func()) {
	return holdNthProduce(t, c, 1)
}

// holdNthProduce is holdProduce for the nth produce request (counted from
// 1); the others pass.
func holdNthProduce(t *testing.T, c *kfake.Cluster, nth int32) (held <-chan struct{}, release func()) {
	ch := make(chan struct{})
	gate := make(chan struct{})
	finished := make(chan struct{})
	var n atomic.Int32
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n.Add(1) != nth {
			return nil, nil, false
		}
		close(ch)
		c.SleepControl(func() { <-gate })
		close(finished)
		return nil, nil, false
	})
	t.Cleanup(func() {
		release()
		select {
		case <-ch:
			<-finished
		default:
		}
	})
	return ch, release
}

// A Write whose context ends while its produce request is at the broker
// fails as unknown, not failed: the record is stored all the same once the
// broker answers.
func TestPublisherCancelledInFlightIsUnknown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic, Record: keyedRecord})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)

	held, release := holdProduce(t, c)
	wctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { res <- pub.Write(wctx, keyed{Key: "a", Seq: 1}) }()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the produce request never reached the broker")
	}
	cancel()
	err = <-res
	require.ErrorIs(t, err, kafka.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "may have been stored")
	var pe *kafka.ProduceError
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.Unknown)
	assert.Equal(t, topic, pe.Topic)
	assert.True(t, resilience.IsBlameless(err), "not the item's fault")
	assert.Equal(t, int64(1), pub.Unknown())

	release()
	recs := readTopic(t, c.ListenAddrs(), topic, 1, kgo.ReadUncommitted())
	assert.Equal(t, "1", string(recs[0].Value), "the unknown record was stored")
}

// A produce that gets no answer within AckTimeout, on the publisher's
// clock, is unknown and transient.
func TestPublisherAckTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic, Record: keyedRecord,
		Clock: clock, AckTimeout: kafka.DefaultAckTimeout})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	held, release := holdProduce(t, c)
	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, keyed{Key: "a", Seq: 1}) }()
	<-held
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(kafka.DefaultAckTimeout)
	err = <-res
	require.ErrorIs(t, err, kafka.ErrOutcomeUnknown)
	assert.True(t, resilience.IsTransient(err), "transient, for the item retry")
	assert.Contains(t, err.Error(), "AckTimeout")
	release()
	require.NoError(t, pub.Close(ctx), "Close waits for the held record's ack")
	assert.Len(t, readTopic(t, c.ListenAddrs(), topic, 1, kgo.ReadUncommitted()), 1)
}

// Writes under way when a broker of the cluster is removed, and added
// again, all succeed: each record is stored once, in the order of its key.
func TestPublisherBrokerRemovedAndReadded(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	topic := pubName(t)
	createTopicOn(t, c, topic, 6)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic,
		PubRetry: kafka.PubRetry{Enabled: true}, Record: func(k keyed) (*kgo.Record, error) {
			if k.Seq == 10 && k.Key == "k00" {
				// Mid-stream: the leader of a partition goes away, and
				// comes back.
				leader := c.LeaderFor(topic, 0)
				if err := c.RemoveNode(leader); err != nil {
					return nil, err
				}
				if _, _, err := c.AddNode(leader, 0); err != nil {
					return nil, err
				}
			}
			return keyedRecord(k)
		}})
	require.NoError(t, err)
	publishAll(t, pubContext(t), pub, keyedItems(6, 25))
	checkKeyOrder(t, readTopic(t, c.ListenAddrs(), topic, 6*25, kgo.ReadUncommitted()), 6, 25)
	assert.Equal(t, int64(6*25), countTopic(t, c.ListenAddrs(), topic), "nothing stored twice")
}

// A topic that does not exist fails the Write permanently, saying so.
func TestPublisherUnknownTopic(t *testing.T) {
	t.Parallel()
	c := shared(t)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: pubName(t), Record: keyedRecord})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	err = pub.Write(ctx, keyed{Key: "a"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no such topic")
	assert.False(t, resilience.IsTransient(err))
	assert.NotErrorIs(t, err, kafka.ErrOutcomeUnknown)
}
