package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/resilience"
)

// The watch counts the produce requests its client wrote, and nothing
// else: not the metadata a client asks first, not a produce of which no
// byte was written.
func TestSentWatchCountsProduceWrites(t *testing.T) {
	w := &sentWatch{}
	m := w.mark()
	w.OnBrokerWrite(kgo.BrokerMetadata{}, int16(kmsg.Metadata), 100, 0, 0, nil)
	w.OnBrokerWrite(kgo.BrokerMetadata{}, int16(kmsg.Produce), 0, 0, 0, errors.New("broken pipe"))
	assert.False(t, w.sentSince(m), "no produce byte written")
	w.OnBrokerWrite(kgo.BrokerMetadata{}, int16(kmsg.Produce), 1, 0, 0, errors.New("broken pipe"))
	assert.True(t, w.sentSince(m), "a produce partly written may be stored")

	// Lost answers: a produce written whose write or read failed.
	assert.False(t, w.lostSince(m))
	w.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Produce), kgo.BrokerE2E{BytesWritten: 100})
	w.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Metadata), kgo.BrokerE2E{BytesWritten: 100, ReadErr: errors.New("EOF")})
	w.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Produce), kgo.BrokerE2E{ReadErr: errors.New("EOF")})
	assert.False(t, w.lostSince(m), "answered, not a produce, or nothing written")
	w.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Produce), kgo.BrokerE2E{BytesWritten: 100, ReadErr: errors.New("EOF")})
	assert.True(t, w.lostSince(m), "a produce written whose answer was not read")
	m = w.mark()
	w.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Produce), kgo.BrokerE2E{BytesWritten: 1, WriteErr: errors.New("broken pipe")})
	assert.True(t, w.lostSince(m), "a produce partly written")
	m = w.mark()
	w.OnBrokerDisconnect(kgo.BrokerMetadata{}, nil)
	assert.True(t, w.lostSince(m), "a broken connection may have held an answer")

	// A real client's produce is counted.
	c := ownCluster(t)
	_, err := adminOf(t, c).CreateTopic(context.Background(), 1, 1, nil, "sent-watch")
	require.NoError(t, err)
	live := &sentWatch{}
	cl, err := kgo.NewClient(producerOpts(c.ListenAddrs(), 10*time.Second, time.Second, nil, live)...)
	require.NoError(t, err)
	defer cl.Close()
	m = live.mark()
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "sent-watch", Value: []byte("v")}).FirstErr())
	assert.True(t, live.sentSince(m))
}

// A failure the client gives without a broker's answer is "not stored"
// only while no produce request was written since the record was taken;
// else its outcome is unknown. A broker's error code is its answer,
// whatever was written.
func TestProduceAnswerWithWritesIsUnknown(t *testing.T) {
	ctx := context.Background()
	for _, err := range []error{
		kgo.ErrRecordTimeout,
		fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotLeaderForPartition),
		kgo.ErrRecordRetries,
		errors.New("unable to dial: connection refused"),
		kerr.LeaderNotAvailable, // a metadata answer's, not the record's
		kerr.ClusterAuthorizationFailed,
	} {
		quiet := produceAnswer(ctx, "t", err, false, false)
		require.Error(t, quiet)
		assert.False(t, isUnknown(quiet), "%v with nothing sent: not stored", err)
		loud := produceAnswer(ctx, "t", err, true, false)
		assert.True(t, isUnknown(loud), "%v after a produce was written: %v", err, loud)
		assert.True(t, resilience.IsTransient(loud), "transient: %v", loud)
	}
	for _, err := range []error{kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTimestamp,
		kerr.UnknownTopicOrPartition, kerr.MessageTooLarge} {
		refused := produceAnswer(ctx, "t", err, true, false)
		assert.False(t, isUnknown(refused), "a refusal of the batch, no answer lost: %v", refused)
		afterLost := produceAnswer(ctx, "t", err, true, true)
		assert.True(t, isUnknown(afterLost), "a refusal after a lost answer may follow a stored send: %v", afterLost)
	}
	aborted := produceAnswer(ctx, "t", kgo.ErrAborting, true, true)
	assert.False(t, isUnknown(aborted), "an abort discards the record: %v", aborted)
}

// The publisher's answer: with nothing written since the mark, a broker
// code the client fails a record with can only be a metadata answer's
// (no leader), and the record was never sent (PubRetry's to produce
// again); once a produce was written, the same code is unknown.
func TestPublisherAnswerMetadataCodeIsNeverSent(t *testing.T) {
	c := &pubCore{}
	m := c.sent.mark()
	err := c.answer(context.Background(), "t", kerr.LeaderNotAvailable, m)
	var notSent *notSentError
	require.ErrorAs(t, err, &notSent, "nothing written: never sent")
	assert.False(t, errors.Is(err, ErrOutcomeUnknown))
	assert.Zero(t, c.unknown.Load())

	c.sent.OnBrokerWrite(kgo.BrokerMetadata{}, int16(kmsg.Produce), 10, 0, 0, nil)
	err = c.answer(context.Background(), "t", kerr.LeaderNotAvailable, m)
	require.ErrorIs(t, err, ErrOutcomeUnknown, "a produce written since: unknown")
	assert.True(t, resilience.IsBlameless(err))
	assert.Equal(t, int64(1), c.unknown.Load())
}
