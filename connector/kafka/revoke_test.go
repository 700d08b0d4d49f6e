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

// TestRevokeTimeoutLetsThePartitionGo: member A holds the first record of
// each of its two partitions when B joins. A's revoke of one partition
// waits RevokeTimeout on A's clock, then lets it go uncommitted: B reads
// it from the start (what A had emitted of it is handled by both: the
// documented window), and A's late settle of it commits nothing, so B's commits are
// not rewound. A's other partition commits as usual.
func TestRevokeTimeoutLetsThePartitionGo(t *testing.T) {
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

	var (
		mu      sync.Mutex
		handled = map[string][][2]int64{}
		held    = map[int32]bool{}
	)
	note := func(member string, m kafka.Message) {
		mu.Lock()
		defer mu.Unlock()
		handled[member] = append(handled[member], [2]int64{int64(m.Partition), m.Offset})
	}
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
		note("A", m)
		return nil
	}, pipeline.Keyed(2, kafka.RecordKey))
	pA, err := bA.Build()
	require.NoError(t, err)
	doneA := make(chan error, 1)
	go func() {
		_, err := pA.Run(testContext(t))
		doneA <- err
	}()
	waitFor(t, "A holds the first record of both partitions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) == 2
	})

	cfgB := a.config(topic)
	cfgB.CommitInterval = 50 * time.Millisecond
	srcB, err := kafka.NewSource(cfgB)
	require.NoError(t, err)
	kafka.AddClientOpts(srcB, fast)
	bB := pipeline.New("B")
	pipeline.ForEach(bB, "store", pipeline.Source(bB, "consume", srcB), func(_ context.Context, m kafka.Message) error {
		note("B", m)
		return nil
	})
	pB, err := bB.Build()
	require.NoError(t, err)
	doneB := make(chan error, 1)
	go func() {
		_, err := pB.Run(testContext(t))
		doneB <- err
	}()

	// A's committer and its revoke's timer wait on A's clock.
	require.NoError(t, clock.BlockUntilContext(testContext(t), 2))
	clock.Advance(cfgA.RevokeTimeout)
	waitFor(t, "B handled the revoked partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled["B"]) == 5
	})
	mu.Lock()
	revoked := int32(handled["B"][0][0])
	assert.Equal(t, [2]int64{int64(revoked), 0}, handled["B"][0], "B starts the revoked partition at its start: nothing was committed")
	mu.Unlock()
	kept := 1 - revoked
	waitFor(t, "B's commit", func() bool { return a.committed(topic, topic)[revoked] == 5 })

	close(release)
	waitFor(t, "A handled the kept partition and the record it held of the revoked one", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range handled["A"] {
			if r[0] == int64(kept) || r[1] == 0 {
				n++
			}
		}
		// The records of the revoked partition that A had emitted
		// before the revoke are in flight in A's pipeline too, and A
		// handles them as well: the window.
		return n == 6
	})
	pA.Drain()
	require.NoError(t, <-doneA)
	pB.Drain()
	require.NoError(t, <-doneB)
	assert.Equal(t, map[int32]int64{revoked: 5, kept: 5}, a.committed(topic, topic),
		"A's late settle of the revoked partition did not rewind B's commit")
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, handled["A"], [2]int64{int64(revoked), 0}, "A finished the record it held")
	assert.Contains(t, handled["B"], [2]int64{int64(revoked), 0}, "and B handled it again: the window past RevokeTimeout")
}
