package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/resilience"
)

// ownCluster starts a cluster of one broker for t, closed when t ends.
func ownCluster(t testing.TB) *kfake.Cluster {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// adminOf returns an admin client of c.
func adminOf(t testing.TB, c *kfake.Cluster) *kadm.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// fetchOne reads the first record of topic, failing t after a bounded
// wait.
func fetchOne(t testing.TB, c *kfake.Cluster, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "no record in %s", topic)
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

func newTestCopier(t testing.TB, kc *kfake.Cluster, topic string, clock clockwork.Clock, delays ...time.Duration) *copier {
	sent := &sentWatch{}
	cl, err := kgo.NewClient(producerOpts(kc.ListenAddrs(), 10*time.Second, time.Second, nil, sent)...)
	require.NoError(t, err)
	c := &copier{cl: cl, sent: sent, clock: clock, timeout: 10 * time.Second, consumer: consumerName(topic, "g"), topic: topic,
		retry: RetryTopics{Enabled: true, Delays: delays}}
	t.Cleanup(func() { c.close(time.Second) })
	return c
}

// Declare creates the missing tiers with the topic's partition count, and
// leaves one that exists alone.
func TestDeclareTiers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kc := ownCluster(t)
	adm := adminOf(t, kc)
	topic := "declare-tiers"
	_, err := adm.CreateTopic(ctx, 3, 1, nil, topic)
	require.NoError(t, err)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, TierTopic(topic, time.Second))
	require.NoError(t, err)
	tiers := RetryTopics{Enabled: true, Delays: []time.Duration{time.Second, time.Minute}}.TierTopics(topic)
	require.NoError(t, declareTiers(ctx, adm, topic, tiers))
	require.NoError(t, declareTiers(ctx, adm, topic, tiers), "declaring again is fine")
	// A fresh client: the client caches metadata for a while.
	ds, err := adminOf(t, kc).ListTopics(ctx, tiers...)
	require.NoError(t, err)
	assert.Len(t, ds[TierTopic(topic, time.Minute)].Partitions, 3, "a new tier has the topic's partitions")
	assert.Len(t, ds[TierTopic(topic, time.Second)].Partitions, 1, "a tier that existed is left alone")

	err = declareTiers(ctx, adm, "declare-nowhere", []string{"declare-nowhere.retry.1s"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "declare-nowhere")
}

// A tier copy goes to the tier that covers the wait, in the partition
// number of the first record, with its story and its due time; the
// record's key, value and own headers stay.
func TestTierCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	topic := "tier-copy"
	kc := ownCluster(t)
	adm := adminOf(t, kc)
	_, err := adm.CreateTopic(ctx, 4, 1, nil, topic)
	require.NoError(t, err)
	r := RetryTopics{Enabled: true, Delays: []time.Duration{time.Second, 30 * time.Second}}
	require.NoError(t, declareTiers(ctx, adm, topic, r.TierTopics(topic)))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	c := newTestCopier(t, kc, topic, clock, r.Delays...)
	orig := &kgo.Record{Topic: topic, Partition: 2, Offset: 7, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "own", Value: []byte("1")}}}
	tier, err := c.tierCopy(ctx, orig, copySpec{topic: topic, partition: 2, offset: 7, deliveries: 1,
		story: story{retries: 1, attempts: 1, origin: "n"}}, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, TierTopic(topic, 30*time.Second), tier, "5s is covered by the 30s tier")
	got := fetchOne(t, kc, tier)
	assert.Equal(t, int32(2), got.Partition, "the partition number of the first record")
	assert.Equal(t, "k", string(got.Key))
	assert.Equal(t, "v", string(got.Value))
	v, _ := header(got.Headers, "own")
	assert.Equal(t, "1", v)
	cr := carriedOf(got.Headers, consumerName(topic, "g"))
	require.True(t, cr.ok)
	assert.True(t, clock.Now().Add(5*time.Second).Equal(cr.due), "due its wait from now, not its tier's delay")
	assert.Equal(t, int64(7), cr.offset)
	assert.Equal(t, 1, cr.past.retries)
}

// A topic copy goes back to the topic, in its partition, with no due time.
func TestTopicCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	topic := "topic-copy"
	kc := ownCluster(t)
	_, err := adminOf(t, kc).CreateTopic(ctx, 3, 1, nil, topic)
	require.NoError(t, err)
	c := newTestCopier(t, kc, topic, clockwork.NewFakeClock())
	orig := &kgo.Record{Topic: topic, Partition: 1, Offset: 0, Value: []byte("v")}
	require.NoError(t, c.topicCopy(ctx, orig, copySpec{topic: topic, partition: 1, story: story{failures: 1}}))
	got := fetchOne(t, kc, topic)
	assert.Equal(t, int32(1), got.Partition)
	cr := carriedOf(got.Headers, consumerName(topic, "g"))
	require.True(t, cr.ok)
	assert.Equal(t, 1, cr.past.failures)
	assert.True(t, cr.due.IsZero())
}

// A produce that gets no answer within its wait is unknown, not failed:
// the record may be stored. It is transient, and the copier's caller
// does not settle the original on it.
func TestProduceUnknown(t *testing.T) {
	t.Parallel()
	kc := ownCluster(t)
	topic := "unknown-outcome"
	_, err := adminOf(t, kc).CreateTopic(context.Background(), 1, 1, nil, topic)
	require.NoError(t, err)
	swallowed := make(chan struct{})
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(swallowed)
		return nil, nil, true // taken, never answered
	})
	clock := clockwork.NewFakeClock()
	c := newTestCopier(t, kc, topic, clock)
	done := make(chan error, 1)
	go func() {
		done <- c.topicCopy(context.Background(), &kgo.Record{Topic: topic, Value: []byte("v")}, copySpec{topic: topic})
	}()
	<-swallowed
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(c.timeout)
	err = <-done
	require.Error(t, err)
	assert.True(t, isUnknown(err), "no answer: unknown, %v", err)
	assert.True(t, resilience.Classifier{}.IsTransient(err))
	assert.Contains(t, err.Error(), "outcome unknown")
}
