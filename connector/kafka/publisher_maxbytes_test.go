package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
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
