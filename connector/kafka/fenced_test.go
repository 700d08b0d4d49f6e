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

// TestFencedCommitLosesTheSession: a group that answers every commit
// ILLEGAL_GENERATION (it dropped the member, as it does when a silent link
// keeps the heartbeats from it) ends the Run with ErrConnectionLost, for
// the node restart to rejoin, rather than leaving the source waiting
// forever for room that only a commit frees: with MaxInFlight records
// settled and none committed, the source polls no more, and would never
// see the group's error.
func TestFencedCommitLosesTheSession(t *testing.T) {
	t.Parallel()
	for _, code := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID} {
		t.Run(code.Message, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1)
			a := newAdmin(t, c)
			topic := uniqueName(t)
			a.topic(topic, 1)
			a.produce(topic, records(0, 6)...)
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
						sp.Partition, sp.ErrorCode = rp.Partition, code.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			cfg := a.config(topic)
			cfg.MaxInFlight = 3 // fewer than the records: the source runs out of room
			src, err := kafka.NewSource(cfg)
			require.NoError(t, err)
			b := pipeline.New("fenced")
			msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
				o.NodeRestart.MaxRestarts = 1
				o.NodeRestart.Backoff = resilience.NoBackoff()
			}))
			pipeline.ForEach(b, "store", msgs, func(context.Context, kafka.Message) error { return nil })
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(testContext(t))
			require.Error(t, err, "the run ends rather than stall")
			assert.ErrorIs(t, err, kafka.ErrConnectionLost)
			assert.ErrorIs(t, err, code)
			assert.ErrorContains(t, err, "kafka: commit offsets of "+topic)
		})
	}
}
