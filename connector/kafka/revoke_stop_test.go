package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// A's revoke waits for a held record (its clock stands still) when A is
// stopped and the record released: A's run and Close end without the
// clock, and every record ends committed, B's commits not rewound.
func TestStopWhileRevokeWaits(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 2)
	a.produce(topic, append(records(0, 5), records(1, 5)...)...)
	fast := kgo.HeartbeatInterval(100 * time.Millisecond)
	clock := clockwork.NewFakeClock()
	cfgA := a.config(topic)
	cfgA.Clock, cfgA.RevokeTimeout, cfgA.CommitInterval = clock, 5*time.Second, time.Hour
	srcA, err := kafka.NewSource(cfgA)
	require.NoError(t, err)
	kafka.AddClientOpts(srcA, fast)
	var mu sync.Mutex
	held := map[int32]bool{}
	release := make(chan struct{})
	bA := pipeline.New("A")
	pipeline.ForEach(bA, "store", pipeline.Source(bA, "consume", srcA), func(ctx context.Context, m kafka.Message) error {
		if m.Offset == 0 {
			mu.Lock()
			held[m.Partition] = true
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, pipeline.Keyed(2, kafka.RecordKey))
	pA, err := bA.Build()
	require.NoError(t, err)
	doneA := make(chan error, 1)
	go func() { _, err := pA.Run(testContext(t)); doneA <- err }()
	waitFor(t, "A holds both", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 2 })

	cfgB := a.config(topic)
	cfgB.CommitInterval = 50 * time.Millisecond
	srcB, err := kafka.NewSource(cfgB)
	require.NoError(t, err)
	kafka.AddClientOpts(srcB, fast)
	bB := pipeline.New("B")
	pipeline.ForEach(bB, "store", pipeline.Source(bB, "consume", srcB), func(_ context.Context, m kafka.Message) error { return nil })
	pB, err := bB.Build()
	require.NoError(t, err)
	doneB := make(chan error, 1)
	go func() { _, err := pB.Run(testContext(t)); doneB <- err }()
	require.NoError(t, clock.BlockUntilContext(testContext(t), 2)) // committer + revoke timer
	srcA.Stop()
	close(release)
	select {
	case err := <-doneA:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("A did not end with its clock standing still")
	}
	waitFor(t, "all committed", func() bool {
		c := a.committed(topic, topic)
		return c[0] == 5 && c[1] == 5
	})
	pB.Drain()
	require.NoError(t, <-doneB)
	assert.Equal(t, map[int32]int64{0: 5, 1: 5}, a.committed(topic, topic))
}
