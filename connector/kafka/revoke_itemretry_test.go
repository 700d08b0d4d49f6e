package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A second member joins while member A holds, in each of its two
// partitions, a record waiting in the pipeline's own item retry (a
// backoff on the pipeline's fake clock). A's revoke waits (on the
// source's fake clock, not advanced), the retry's backoff passes, the
// record succeeds: the revoke commits past it, B never handles a record
// A handled, the retry counts nothing against the record (no copy, no
// letter, Deliveries 1 on both calls), and the group commits the end.
func TestRevokeWhileAnItemRetryWaits(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 2)
	var recs []*kgo.Record
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 3; i++ {
			recs = append(recs, rec(p, fmt.Sprintf("k%d", p), fmt.Sprintf("p%d-%d", p, i)))
		}
	}
	a.produce(topic, recs...)
	fast := kgo.HeartbeatInterval(100 * time.Millisecond)

	srcClock := clockwork.NewFakeClock()
	pipeClock := clockwork.NewFakeClock()
	const backoff = 2 * time.Second
	cfgA := a.config(topic)
	cfgA.Clock, cfgA.RevokeTimeout, cfgA.CommitInterval = srcClock, 10*time.Second, time.Hour
	cfgA.MaxDeliveries = 3
	srcA, err := kafka.NewSource(cfgA)
	require.NoError(t, err)
	kafka.AddClientOpts(srcA, fast)

	type call struct {
		member     string
		value      string
		deliveries int
		failed     bool
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	errFlakyStore := errors.New("store busy, try again")
	deadA := deadletter.NewMemory(10)
	bA := pipeline.New("A", pipeline.WithClock(pipeClock), pipeline.WithDeadLetter(deadA),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Constant(backoff)
		}))
	pipeline.ForEach(bA, "store", pipeline.Source(bA, "consume", srcA), func(ctx context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		v := string(m.Value)
		first := true
		for _, c := range calls {
			if c.value == v {
				first = false
			}
		}
		fail := m.Offset == 1 && first
		calls = append(calls, call{"A", v, m.Deliveries, fail})
		if fail {
			return resilience.MarkTransient(errFlakyStore)
		}
		return nil
	}, pipeline.Keyed(2, kafka.RecordKey))
	pA, err := bA.Build()
	require.NoError(t, err)
	doneA := runAsync(t, pA, testContext(t))

	count := func(member, v string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range calls {
			if c.member == member && c.value == v {
				n++
			}
		}
		return n
	}
	waitWithin(t, 15*time.Second, func() bool {
		return count("A", "p0-1") == 1 && count("A", "p1-1") == 1 && count("A", "p0-0") == 1 && count("A", "p1-0") == 1
	}, func() string {
		select {
		case err := <-doneA:
			return fmt.Sprintf("A's run ended: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("A's first calls: %+v", calls)
	})

	base := -1
	for k := 8; k >= 0 && base < 0; k-- {
		bctx, bcancel := context.WithTimeout(testContext(t), 300*time.Millisecond)
		if srcClock.BlockUntilContext(bctx, k) == nil {
			base = k
		}
		bcancel()
	}
	require.GreaterOrEqual(t, base, 0)
	t.Logf("source clock waiters before B joins: %d", base)
	cfgB := a.config(topic)
	cfgB.CommitInterval = 50 * time.Millisecond
	cfgB.MaxDeliveries = 3
	srcB, err := kafka.NewSource(cfgB)
	require.NoError(t, err)
	kafka.AddClientOpts(srcB, fast)
	bB := pipeline.New("B", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	pipeline.ForEach(bB, "store", pipeline.Source(bB, "consume", srcB), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{"B", string(m.Value), m.Deliveries, false})
		return nil
	})
	pB, err := bB.Build()
	require.NoError(t, err)
	doneB := runAsync(t, pB, testContext(t))

	// A's committer ticker and its revoke's timer.
	require.NoError(t, srcClock.BlockUntilContext(testContext(t), base+1), "A's revoke waits")
	advanceUntil(t, pipeClock, time.Second, func() bool { return count("A", "p0-1") == 2 && count("A", "p1-1") == 2 })
	waitWithin(t, 15*time.Second, func() bool {
		c := a.committed(topic, topic)
		return c[0] == 3 || c[1] == 3
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("the revoke did not commit the revoked partition: committed %v, calls %+v", a.committed(topic, topic), calls)
	})
	// Give B a moment to show whatever it would read: it reads nothing,
	// as every record is committed.
	waitFor(t, "A handled everything", func() bool {
		return count("A", "p0-2") == 1 && count("A", "p1-2") == 1
	})
	pA.Drain()
	select {
	case err := <-doneA:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("A's drain did not end within 10s; committed %v; calls %+v", a.committed(topic, topic), calls)
	}
	pB.Drain()
	require.NoError(t, waitRun(t, doneB))

	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		assert.Equal(t, "A", c.member, "B handled nothing A handled: %+v", c)
		assert.Equal(t, 1, c.deliveries, "an in-process retry is no redelivery: %+v", c)
	}
	assert.Zero(t, deadA.Len(), "nothing dead-lettered")
	assert.Zero(t, srcA.Poisoned())
	ends, err := a.adm.ListEndOffsets(testContext(t), topic)
	require.NoError(t, err)
	for p := int32(0); p < 2; p++ {
		e, _ := ends.Lookup(topic, p)
		assert.Equal(t, int64(3), e.Offset, "no copy counted a failure against the retried record")
	}
	assert.Equal(t, map[int32]int64{0: 3, 1: 3}, a.committed(topic, topic))
}
