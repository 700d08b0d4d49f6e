package kafka_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// TestRefusedCommitFailsTheRun: a group that refuses every commit
// (GROUP_AUTHORIZATION_FAILED) fails the run with a permanent error that
// says so, rather than leaving the source stalled on records it can
// never commit.
func TestRefusedCommitFailsTheRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 3)...)
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = r.Version
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cfg := a.config(topic)
	cfg.CommitEvery = 1
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	b := pipeline.New("refused")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(context.Context, kafka.Message) error { return nil })
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.Error(t, err)
	assert.ErrorIs(t, err, kerr.GroupAuthorizationFailed)
	assert.ErrorContains(t, err, "kafka: commit offsets of "+topic)
	assert.False(t, resilience.IsTransient(err), "%v", err)
}
