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
	"github.com/twmb/franz-go/pkg/kgo"
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
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 4)
	tier := kafka.TierTopic(topic, time.Hour)
	a.topic(tier, 1)
	var recs []*kgo.Record
	for p := int32(0); p < 4; p++ {
		recs = append(recs, rec(p, fmt.Sprintf("k%d", p), fmt.Sprintf("p%d", p)))
	}
	a.produce(topic, recs...)
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
	fast := kgo.HeartbeatInterval(100 * time.Millisecond)
	retry := kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}

	srcClock := clockwork.NewFakeClock()
	cfgA := a.config(topic)
	cfgA.Clock, cfgA.RevokeTimeout, cfgA.CommitInterval = srcClock, time.Second, time.Hour
	cfgA.Retry = retry
	srcA, err := kafka.NewSource(cfgA)
	require.NoError(t, err)
	kafka.AddClientOpts(srcA, fast)

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

	cfgB := a.config(topic)
	cfgB.CommitInterval = 50 * time.Millisecond
	cfgB.Retry = retry
	srcB, err := kafka.NewSource(cfgB)
	require.NoError(t, err)
	kafka.AddClientOpts(srcB, fast)
	bB := pipeline.New("B", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	pipeline.ForEach(bB, "store", pipeline.Source(bB, "consume", srcB), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		seenB[string(m.Value)]++
		mu.Unlock()
		return nil
	})
	pB, err := bB.Build()
	require.NoError(t, err)
	doneB := runAsync(t, pB, testContext(t))
	// A's revoke starts, then its RevokeTimeout (1s on A's clock) passes.
	// The clock moves at most 8s in all: the copies' own wait for their
	// acks is 10s on it, and must not end.
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
		if advanced < 8 {
			advanced++
			srcClock.Advance(time.Second)
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
