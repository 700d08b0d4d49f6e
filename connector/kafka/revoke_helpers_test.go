package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
)

// fastHeartbeat lets a member of the revoke tests see a rebalance soon.
var fastHeartbeat = kgo.HeartbeatInterval(100 * time.Millisecond)

// fourPartitions makes a cluster of the test's own with a topic of four
// partitions, one record each (key kN, value pN), and the topic's tier of
// an hour.
func fourPartitions(t *testing.T) (c *kfake.Cluster, a *admin, topic, tier string) {
	t.Helper()
	c = newCluster(t, 1)
	a = newAdmin(t, c)
	topic = uniqueName(t)
	a.topic(topic, 4)
	tier = kafka.TierTopic(topic, time.Hour)
	a.topic(tier, 1)
	var recs []*kgo.Record
	for p := int32(0); p < 4; p++ {
		recs = append(recs, rec(p, fmt.Sprintf("k%d", p), fmt.Sprintf("p%d", p)))
	}
	a.produce(topic, recs...)
	return c, a, topic, tier
}

// joinMemberB runs a second member of topic's group, with retry, whose
// pipeline counts each value it stores in seen, under mu: joining, it
// makes the cooperative balancer move half of the partitions to it.
func joinMemberB(t *testing.T, a *admin, topic string, retry kafka.RetryTopics, mu *sync.Mutex, seen map[string]int) (*pipeline.Pipeline, <-chan error) {
	t.Helper()
	cfg := a.config(topic)
	cfg.CommitInterval = 50 * time.Millisecond
	cfg.Retry = retry
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	kafka.AddClientOpts(src, fastHeartbeat)
	b := pipeline.New("B", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		seen[string(m.Value)]++
		mu.Unlock()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	return p, runAsync(t, p, testContext(t))
}
