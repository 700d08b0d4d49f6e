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
// duplicate window). Then A's blocked calls fail transiently: for a record
// whose partition A no longer owns the DeadLetter sink writes nothing (its
// new owner read it already; a tier copy would be a third delivery), and
// only the records of the partitions A kept go to the tier.
func TestBrokerRetryAfterRevokeWritesNothing(t *testing.T) {
	t.Parallel()
	c, a, topic, tier := fourPartitions(t)
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
	dlA := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		err := srcA.DeadLetter(deadletter.NewMemory(10)).Write(ctx, env)
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
	t.Logf("B read %v", seenB)
	mu.Unlock()
	close(release)
	waitWithin(t, 20*time.Second, func() bool {
		dlMu.Lock()
		defer dlMu.Unlock()
		return len(dlErrs) >= 4
	}, func() string { return "A's dead-letter writes" })
	dlMu.Lock()
	t.Logf("A's dead-letter writes: %v", dlErrs)
	for _, err := range dlErrs {
		assert.NoError(t, err, "a write for a record whose partition moved writes nothing and fails nothing")
	}
	dlMu.Unlock()
	// Each write returned after its copy's ack: the tier holds them all.
	n := tierRecords(t, c, tier)
	t.Logf("tier records: %d (moved partitions %d)", n, movedN)
	pA.Drain()
	pB.Drain()
	<-doneA
	<-doneB
	assert.Equal(t, int64(4-movedN), n, "A copied to the tier the records of partitions it no longer owns, which B read again already")
}
