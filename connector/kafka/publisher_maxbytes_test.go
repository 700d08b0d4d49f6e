package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// Every MaxRecordBytes that Validate takes opens: above the client's
// default largest request (100 MiB), up to the largest Validate takes
// (1 GiB less 1 KiB); one more is refused by Validate, naming the field.
func TestPublisherMaxRecordBytesValidOpens(t *testing.T) {
	t.Parallel()
	c := shared(t)
	for _, n := range []int{100 << 20, 200 << 20, 1<<30 - 1024} {
		cfg := kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: pubName(t), Record: keyedRecord, MaxRecordBytes: n}
		require.NoError(t, cfg.Validate(), "Validate takes %d", n)
		pub, err := kafka.NewPublisher(cfg)
		require.NoError(t, err)
		ctx := pubContext(t)
		if assert.NoError(t, pub.Open(ctx), "MaxRecordBytes %d: a config Validate passed opens", n) {
			assert.NoError(t, pub.Close(ctx))
		}
	}
	cfg := kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: pubName(t), Record: keyedRecord, MaxRecordBytes: 1<<30 - 1023}
	err := cfg.Validate()
	require.ErrorIs(t, err, kafka.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "MaxRecordBytes")
}

// MaxRecordBytes counts a header's encoded lengths too: a record whose
// key, value and headers' bytes fit but whose 600 empty headers do not
// is refused before it is sent, naming the setting, not by the client's
// batch limit after a detour to be produced alone.
func TestPublisherMaxRecordBytesCountsHeaders(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[*kgo.Record]{Brokers: c.ListenAddrs(), Topic: topic, MaxRecordBytes: 1000,
		Record: func(r *kgo.Record) (*kgo.Record, error) { return r, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	r := &kgo.Record{Key: []byte("big"), Value: make([]byte, 990)}
	for range 600 {
		r.Headers = append(r.Headers, kgo.RecordHeader{})
	}
	err = pub.Write(ctx, r)
	require.ErrorIs(t, err, kafka.ErrRecordTooLarge)
	assert.Contains(t, err.Error(), "MaxRecordBytes (1000)")
	assert.False(t, resilience.IsTransient(err))
	// Within the count, headers and all: stored.
	require.NoError(t, pub.Write(ctx, &kgo.Record{Key: []byte("k"), Value: make([]byte, 990),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}))
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic))
}
