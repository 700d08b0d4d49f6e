package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A's four records failed and their broker retries' copies are under way
// (their partitions were still A's) when B joins. A's revoke waits its
// RevokeTimeout for them, in vain: the copies wait for their acks. The
// revoke must not then commit without them and let B read them again
// while the copies are stored too (a third delivery): it waits for the
// copies under way, and commits past those stored. Each record is then
// delivered once more, by its copy or by B, never both.
func TestRevokeWaitsForCopiesUnderWay(t *testing.T) {
	t.Parallel()
	c, a, topic, tier := fourPartitions(t)
	gate := make(chan struct{})
	var held atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		held.Add(1)
		c.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)
	retry := kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}

	srcClock := clockwork.NewFakeClock()
	cfgA := a.config(topic)
	cfgA.Clock, cfgA.RevokeTimeout, cfgA.CommitInterval = srcClock, time.Second, time.Hour
	cfgA.Retry = retry
	srcA, err := kafka.NewSource(cfgA)
	require.NoError(t, err)
	kafka.AddClientOpts(srcA, fastHeartbeat)

	var mu sync.Mutex
	seenA, seenB := map[string]int{}, map[string]int{}
	release := make(chan struct{})
	var dlMu sync.Mutex
	var dlErrs []error
	sinkA := srcA.DeadLetter(deadletter.NewMemory(10))
	dlA := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		err := sinkA.Write(ctx, env)
		dlMu.Lock()
		dlErrs = append(dlErrs, err)
		dlMu.Unlock()
		return err
	})
	bA := pipeline.New("A", pipeline.WithDeadLetter(dlA),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.DeadLetter
		}))
	pipeline.ForEach(bA, "store", pipeline.Source(bA, "consume", srcA), func(ctx context.Context, m kafka.Message) error {
		mu.Lock()
		seenA[string(m.Value)]++
		mu.Unlock()
		<-release
		return resilience.MarkTransient(errFlaky)
	}, pipeline.Keyed(4, kafka.RecordKey))
	pA, err := bA.Build()
	require.NoError(t, err)
	doneA := runAsync(t, pA, testContext(t))
	waitFor(t, "A holds all four", func() bool { mu.Lock(); defer mu.Unlock(); return len(seenA) == 4 })
	close(release)
	waitFor(t, "A's copies under way", func() bool { return held.Load() >= 1 })

	pB, doneB := joinMemberB(t, a, topic, retry, &mu, seenB)
	// A's revoke starts, then its RevokeTimeout (1s on A's clock) passes.
	// The clock moves at most 9.5s in all: the copies' own wait for their
	// acks is 10s on it, and must not end. It moves in steps of 50ms, one
	// a poll, so that a revoke that arms its timer late, on a loaded
	// machine, still sees its second pass (8 steps of 1s once went by
	// before it armed it, in 4 of 20 runs beside other tests).
	waitForStacks(t, "A's revoke", "kafka.(*session).revoked")
	advanced := 0
	waitWithin(t, 20*time.Second, func() bool {
		mu.Lock()
		movedRead := len(seenB) == 2
		mu.Unlock()
		buf := make([]byte, 1<<20)
		waiting := strings.Contains(string(buf[:runtime.Stack(buf, true)]), "kafka.(*session).waitCopies")
		if movedRead || waiting {
			return true
		}
		if advanced < 190 {
			advanced++
			srcClock.Advance(50 * time.Millisecond)
		}
		return false
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("A's revoke neither let the moved partitions go nor waits for their copies; B read %v", seenB)
	})
	openGate()
	waitWithin(t, 20*time.Second, func() bool {
		dlMu.Lock()
		defer dlMu.Unlock()
		return len(dlErrs) >= 4
	}, func() string { return "A's dead-letter writes" })
	dlMu.Lock()
	for _, err := range dlErrs {
		assert.NoError(t, err, "each copy was stored")
	}
	dlMu.Unlock()
	// B reads what A's revoke did not commit: wait until the group has
	// committed every partition past its record (A's revoke, B's commits
	// of what it read, or A's drain for the partitions A kept).
	pA.Drain()
	require.NoError(t, <-doneA)
	waitFor(t, "every partition committed past its record", func() bool {
		com := a.committed(topic, topic)
		for p := int32(0); p < 4; p++ {
			if com[p] < 1 {
				return false
			}
		}
		return true
	})
	pB.Drain()
	require.NoError(t, <-doneB)
	n := tierRecords(t, c, tier)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("tier records %d, B read %v", n, seenB)
	assert.Equal(t, int64(4), n+int64(len(seenB)), "a record both copied to its tier and read again by B is delivered a third time")
}
