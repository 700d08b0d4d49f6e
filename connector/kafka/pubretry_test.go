package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// advanceUntil advances clock by step, polling, until done reports true;
// the client's own waits run in real time, the publisher's on clock.
func advanceUntil(t *testing.T, clock *clockwork.FakeClock, step time.Duration, done func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		if done() {
			return true
		}
		clock.Advance(step)
		return false
	}, pubTimeout, 5*time.Millisecond)
}

// retryPublisher returns a publisher on c that dials through g, with
// PubRetry on, a short delivery timeout and no AckTimeout to speak of.
func retryPublisher(t *testing.T, addrs []string, topic string, g *gate, clock clockwork.Clock) *kafka.Publisher[keyed] {
	t.Helper()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: addrs, Topic: topic, Record: keyedRecord,
		Dial: g.Dial, Clock: clock, AckTimeout: 1000 * time.Hour, DeliveryTimeout: time.Second,
		PubRetry: kafka.PubRetry{Enabled: true, MaxRetry: 2, Delay: time.Minute}})
	require.NoError(t, err)
	return pub
}

// writeAdvancing runs pub.Write(item), advancing clock by a minute while
// it waits, and returns its error.
func writeAdvancing(t *testing.T, ctx context.Context, clock *clockwork.FakeClock, pub *kafka.Publisher[keyed], item keyed) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, item) }()
	var err error
	advanceUntil(t, clock, time.Minute, func() bool {
		select {
		case err = <-res:
			return true
		default:
			return false
		}
	})
	return err
}

// A produce that cannot reach the cluster (the client never learns the
// topic's leader) is sent again under PubRetry, after Delay on the
// publisher's clock, and gives up after MaxRetry retries with an error
// that says it retried and was never stored (not unknown), and is not the
// item's fault. Once the cluster is back, a Write is stored, and the
// records that gave up never are.
func TestPublisherPubRetryGivesUp(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	g := &gate{}
	clock := clockwork.NewFakeClock()
	pub := retryPublisher(t, c.ListenAddrs(), topic, g, clock)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	g.Shut()

	err := writeAdvancing(t, ctx, clock, pub, keyed{Key: "a", Seq: 1})
	require.Error(t, err)
	attempts, ok := resilience.RetriedAttempts(err)
	require.True(t, ok, "marked retried: %v", err)
	assert.Equal(t, 3, attempts)
	assert.Equal(t, int64(2), pub.Retries())
	assert.NotErrorIs(t, err, kafka.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, kgo.ErrRecordTimeout)
	assert.True(t, resilience.IsBlameless(err))
	assert.Zero(t, pub.Unknown())
	assert.Contains(t, err.Error(), "gave up after 3 attempts")

	// The client backs off its metadata requests after the failures: the
	// first Writes once the cluster is back may give up too, never
	// stored.
	g.Open()
	for seq := 2; ; seq++ {
		err := writeAdvancing(t, ctx, clock, pub, keyed{Key: "a", Seq: seq})
		if err == nil {
			break
		}
		_, ok := resilience.RetriedAttempts(err)
		require.True(t, ok, "gave up, never stored: %v", err)
	}
	assert.Zero(t, pub.Unknown())
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic), "only the Write that succeeded was stored")
}

// A record the client already tried to send when its broker went away is
// not failed by the client (the idempotent producer cannot tell whether it
// was stored): the Write ends unknown at AckTimeout, PubRetry leaves it
// alone, and the client stores it, once, when the broker is back.
func TestPublisherBrokerGoneIsUnknown(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	g := &gate{}
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic, Record: keyedRecord,
		Dial: g.Dial, Clock: clock, AckTimeout: time.Hour, DeliveryTimeout: time.Second,
		PubRetry: kafka.PubRetry{Enabled: true, Delay: time.Minute}})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, keyed{Key: "a", Seq: 0}), "the client learns the topic's leader")
	g.Shut()

	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, keyed{Key: "a", Seq: 1}) }()
	// The client tries to send it (and fails to dial) before the wait
	// ends.
	require.Eventually(t, func() bool { return g.Dials() > 2 }, pubTimeout, 5*time.Millisecond)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Hour)
	err = <-res
	require.ErrorIs(t, err, kafka.ErrOutcomeUnknown)
	assert.True(t, resilience.IsTransient(err))
	assert.Zero(t, pub.Retries(), "an unknown outcome is not retried")

	g.Open()
	recs := readTopic(t, c.ListenAddrs(), topic, 2, kgo.ReadUncommitted())
	require.NoError(t, pub.Close(ctx))
	assert.Equal(t, "1", string(recs[1].Value), "the unknown record was stored")
	assert.Equal(t, int64(2), countTopic(t, c.ListenAddrs(), topic), "once")
}

// A produce sent again once the cluster is back is stored once.
func TestPublisherPubRetryRecovers(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	g := &gate{}
	clock := clockwork.NewFakeClock()
	pub := retryPublisher(t, c.ListenAddrs(), topic, g, clock)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	g.Shut()

	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, keyed{Key: "a", Seq: 1}) }()
	// The first attempt fails and waits its Delay; the cluster comes back
	// before the retry.
	require.Eventually(t, func() bool {
		return clock.BlockUntilContext(ctx, 1) == nil && pub.Retries() == 0 && g.Dials() > 1
	}, pubTimeout, 5*time.Millisecond)
	advanceUntil(t, clock, time.Minute, func() bool { return pub.Retries() == 1 })
	g.Open()
	var err error
	advanceUntil(t, clock, time.Minute, func() bool {
		select {
		case err = <-res:
			return true
		default:
			return false
		}
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, pub.Retries(), int64(1))
	recs := readTopic(t, c.ListenAddrs(), topic, 1, kgo.ReadUncommitted())
	assert.Len(t, recs, 1)
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic), "stored once")
}

// Close waits for the records in flight: every Write that handed its
// record to the client before Close is acked and stored, and every Write
// after Close fails with ErrNotOpen, permanent, storing nothing.
func TestPublisherCloseWithRecordsInFlight(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 3)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic, Record: keyedRecord})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))

	held, release := holdProduce(t, c)
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = pub.Write(ctx, keyed{Key: fmt.Sprintf("k%d", i), Seq: i}) })
	}
	<-held
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(ctx) }()
	release()
	require.NoError(t, <-closed)
	wg.Wait()
	stored := 0
	for i, err := range errs {
		if err == nil {
			stored++
			continue
		}
		require.ErrorIs(t, err, kafka.ErrNotOpen, "write %d", i)
		assert.False(t, resilience.IsTransient(err))
	}
	assert.Positive(t, stored, "the held request's records were acked")
	assert.Equal(t, int64(stored), countTopic(t, c.ListenAddrs(), topic), "each acked Write stored, no other")
	err = pub.Write(ctx, keyed{Key: "late"})
	require.ErrorIs(t, err, kafka.ErrNotOpen)
	assert.Contains(t, err.Error(), "not opened, or was closed")

	// Open again works.
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, keyed{Key: "again"}))
	require.NoError(t, pub.Close(ctx))
}

// A Close whose CloseTimeout passes while a produce request is unanswered
// says so, and the Write waiting on it ends unknown.
func TestPublisherCloseTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic, Record: keyedRecord,
		CloseTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	held, release := holdProduce(t, c)
	defer release()
	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, keyed{Key: "a"}) }()
	<-held
	err = pub.Close(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "still in flight at Close")
	err = <-res
	require.ErrorIs(t, err, kafka.ErrOutcomeUnknown)
	assert.Equal(t, int64(1), pub.Unknown())
}

// Validate names every bad field at once.
func TestPublisherConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := kafka.NewPublisher(kafka.PublisherConfig[int]{Brokers: []string{"nohost"}, AckTimeout: -1,
		DeliveryTimeout: 10 * time.Millisecond, MaxRecordBytes: -1, DialTimeout: -1, CloseTimeout: -1,
		PubRetry: kafka.PubRetry{MaxRetry: 101, Delay: -1}})
	require.ErrorIs(t, err, kafka.ErrInvalidConfig)
	for _, field := range []string{"Record", "Brokers[0]", "AckTimeout", "DeliveryTimeout", "MaxRecordBytes",
		"DialTimeout", "CloseTimeout", "PubRetry.MaxRetry", "PubRetry.Delay"} {
		assert.Contains(t, err.Error(), "kafka: "+field+" = ", field)
	}
	var ce *kafka.ConfigError
	require.True(t, errors.As(err, &ce))

	_, err = kafka.NewPublisher(kafka.PublisherConfig[int]{Brokers: []string{"h:1"}, Record: func(int) (*kgo.Record, error) { return nil, nil },
		AckTimeout: 2 * time.Second, DeliveryTimeout: 3 * time.Second})
	assert.ErrorContains(t, err, "kafka: DeliveryTimeout = 3s: must not exceed AckTimeout (2s)")

	_, err = kafka.NewPublisher(kafka.PublisherConfig[int]{Record: func(int) (*kgo.Record, error) { return nil, nil }})
	require.ErrorIs(t, err, kafka.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "kafka: Brokers = []")

	// A Record that fails, or returns nothing, fails its item permanently.
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[int]{Brokers: []string{"127.0.0.1:1"}, Topic: "t",
		Record: func(i int) (*kgo.Record, error) {
			if i == 0 {
				return nil, errors.New("bad item")
			}
			return nil, nil
		}})
	require.NoError(t, err)
	err = pub.Write(context.Background(), 0)
	assert.ErrorContains(t, err, "Record: bad item")
	assert.False(t, resilience.IsTransient(err))
	err = pub.Write(context.Background(), 1)
	assert.ErrorContains(t, err, "nil record")
	assert.False(t, resilience.IsTransient(err))
}
