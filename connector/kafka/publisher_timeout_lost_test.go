package kafka_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// A record is written to the broker and stored, but its connection dies
// before the answer. Every resend is answered NOT_LEADER_FOR_PARTITION
// (retryable), and after one such answer franz-go may fail the batch
// again: at DeliveryTimeout it fails the record with ErrRecordTimeout,
// though its first send was stored. The Write's outcome is unknown, not
// "never sent": PubRetry must not produce it again, and the topic holds
// it once.
func TestPublisherRecordTimeoutAfterALostAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	g := &gate{}
	var produces atomic.Int64
	var refusing atomic.Bool
	refusing.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := produces.Add(1)
		if n == 1 {
			// Let the broker store it; the client loses the response.
			g.Shut()
			g.Open()
			return nil, nil, false
		}
		if !refusing.Load() {
			return nil, nil, false
		}
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic,
		Dial: g.Dial, Clock: clock, AckTimeout: 1000 * time.Hour, DeliveryTimeout: time.Second,
		PubRetry: kafka.PubRetry{Enabled: true, MaxRetry: 5, Delay: time.Minute},
		Record:   func(v []byte) (*kgo.Record, error) { return &kgo.Record{Key: []byte("k"), Value: v}, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, []byte("once")) }()
	var werr error
	advanceUntil(t, clock, time.Minute, func() bool {
		if pub.Retries() > 0 || pub.Unknown() > 0 {
			refusing.Store(false)
		}
		select {
		case werr = <-res:
			return true
		default:
			return false
		}
	})
	require.ErrorIs(t, werr, kafka.ErrOutcomeUnknown)
	assert.True(t, resilience.IsTransient(werr), "transient: %v", werr)
	assert.True(t, resilience.IsBlameless(werr), "blameless: %v", werr)
	assert.Zero(t, pub.Retries(), "PubRetry does not produce an unknown record again")
	assert.Equal(t, int64(1), pub.Unknown())
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic), "one Write, stored once")
}
