package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLeaderMovesAndBrokerRemoved consumes a topic of three partitions on
// a cluster of three brokers while records flow and the cluster changes
// under the source: every partition's leader is elected again, one
// partition's leader moves to another broker, and a broker that is not
// the group's coordinator is removed. Nothing is lost, and the group's
// commits reach the end of every partition, with the leader epoch of the
// record before each.
func TestLeaderMovesAndBrokerRemoved(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 3)
	cfg := a.config(topic)
	cfg.MaxInFlight, cfg.CommitInterval = 64, 100*time.Millisecond

	l := newLedger()
	f := &feeder{a: a, topic: topic, keys: 30, partitions: 3, backlog: 300, stop: make(chan struct{})}
	ctx := testContext(t)
	fed := make(chan error, 1)
	go func() { fed <- f.run(ctx, l.handled.Load) }()
	more := func(n int) {
		from := l.count("")
		waitFor(t, fmt.Sprintf("%d more records handled", n), func() bool { return l.count("") >= from+n })
	}

	m := startMember(t, cfg, "A", l, kgo.HeartbeatInterval(100*time.Millisecond))
	more(300)
	c.ShufflePartitionLeaders()
	more(300)
	leader := c.LeaderFor(topic, 0)
	require.NoError(t, c.MoveTopicPartition(topic, 0, (leader+1)%3))
	more(300)
	coordinator := c.CoordinatorFor(topic)
	victim := (coordinator + 1) % 3
	require.NoError(t, c.RemoveNode(victim))
	more(600)
	close(f.stop)
	require.NoError(t, <-fed)
	total := f.produced
	waitFor(t, "every record handled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.byRec) == total
	})
	m.leave(t)

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Len(t, l.byRec, total, "nothing lost")
	ends := map[int32]int64{}
	for rec := range l.byRec {
		ends[int32(rec[0])] = max(ends[int32(rec[0])], rec[1]+1)
	}
	// A client of the brokers left: the admin's may still try the one
	// removed.
	after := newAdmin(t, c)
	assert.Equal(t, ends, after.committed(topic, topic), "the group committed every partition to its end")
	// Every partition's leader changed at least twice (the election of
	// all, and the broker's removal): its last records, and so the
	// commits, carry the later epoch.
	for p, epoch := range after.epochs(topic, topic) {
		assert.GreaterOrEqual(t, epoch, int32(2), "partition %d's commit carries its leader epoch", p)
	}
}
