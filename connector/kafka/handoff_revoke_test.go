package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// Member A holds one record of each of four partitions in its store,
// blocked. B joins; A's revoke waits past RevokeTimeout and the revoked
// partitions go to B, which reads their records again (the documented
// duplicate window). Then A's blocked calls fail transiently and their
// item retries would wait an hour, past HandOffAfter: the records of the
// partitions A kept are handed off to the tier, while for a record whose
// partition moved the hand-off fails (a copy would be a third delivery),
// and its item waits in process, as without hand-off, and its retry
// succeeds, with no letter and nothing counted against it.
func TestHandOffAfterRevokeWaitsInProcess(t *testing.T) {
	t.Parallel()
	c, a, topic, tier := fourPartitions(t)
	retry := kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}, HandOffAfter: time.Second}

	srcClock := clockwork.NewFakeClock()
	pipeClock := clockwork.NewFakeClock()
	cfgA := a.config(topic)
	cfgA.Clock, cfgA.RevokeTimeout, cfgA.CommitInterval = srcClock, time.Second, time.Hour
	cfgA.Retry = retry
	srcA, err := kafka.NewSource(cfgA)
	require.NoError(t, err)
	kafka.AddClientOpts(srcA, fastHeartbeat)

	var mu sync.Mutex
	seenA, seenB := map[string]int{}, map[string]int{}
	deliveriesA := map[string][]int{}
	release := make(chan struct{})
	deadA := deadletter.NewMemory(10)
	bA := pipeline.New("A", pipeline.WithClock(pipeClock), pipeline.WithDeadLetter(srcA.DeadLetter(deadA)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.Constant(time.Hour)
		}))
	pipeline.ForEach(bA, "store", pipeline.Source(bA, "consume", srcA), func(ctx context.Context, m kafka.Message) error {
		mu.Lock()
		v := string(m.Value)
		seenA[v]++
		n := seenA[v]
		deliveriesA[v] = append(deliveriesA[v], m.Deliveries)
		mu.Unlock()
		<-release
		if n == 1 {
			return resilience.MarkTransient(errFlaky)
		}
		return nil
	}, pipeline.Parallel(4))
	pA, err := bA.Build()
	require.NoError(t, err)
	doneA := runAsync(t, pA, testContext(t))
	waitFor(t, "A holds all four", func() bool { mu.Lock(); defer mu.Unlock(); return len(seenA) == 4 })

	pB, doneB := joinMemberB(t, a, topic, retry, &mu, seenB)
	waitWithin(t, 20*time.Second, func() bool {
		srcClock.Advance(time.Second)
		mu.Lock()
		defer mu.Unlock()
		// The cooperative balancer moves half of the four partitions.
		return len(seenB) == 2
	}, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("B read %v", seenB) })
	mu.Lock()
	movedN := len(seenB)
	var moved []string
	for v := range seenB {
		moved = append(moved, v)
	}
	t.Logf("B read %v", seenB)
	mu.Unlock()
	close(release)
	// The kept partitions' records are handed off; the moved ones' wait
	// an hour of the pipeline's clock in process, then are called again.
	waitWithin(t, 20*time.Second, func() bool {
		if n := tierRecords(t, c, tier); n > int64(4-movedN) {
			return true // copies of moved records: the assertion below says so
		} else if n < int64(4-movedN) {
			return false
		}
		pipeClock.Advance(time.Hour)
		mu.Lock()
		defer mu.Unlock()
		for _, v := range moved {
			if seenA[v] < 2 {
				return false
			}
		}
		return true
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("A's calls %v; tier records %d", seenA, tierRecords(t, c, tier))
	})
	n := tierRecords(t, c, tier)
	t.Logf("tier records: %d (moved partitions %d)", n, movedN)
	pA.Drain()
	pB.Drain()
	require.NoError(t, waitRun(t, doneA))
	require.NoError(t, waitRun(t, doneB))
	assert.Equal(t, int64(4-movedN), n, "A copied to the tier the records of partitions it no longer owns, which B read again already")
	mu.Lock()
	defer mu.Unlock()
	for _, v := range moved {
		assert.Equal(t, []int{1, 1}, deliveriesA[v], "%s: its hand-off failed, and it was called again in process, the same delivery", v)
	}
	assert.Zero(t, deadA.Len(), "nothing dead-lettered")
	assert.Zero(t, srcA.Poisoned(), "nothing counted against a record")
}
