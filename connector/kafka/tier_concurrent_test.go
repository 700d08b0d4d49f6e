package kafka_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// Two branches of a broadcast fail one record transiently at once: two
// dead-letter writes of the same record run concurrently, and one tier
// copy is stored, the second write finding the first's. (Found by review:
// each saw the record not tiered yet and stored a copy, two more
// deliveries of one record.)
func TestConcurrentWritesOfARecordStoreOneCopy(t *testing.T) {
	c, a, topic, cfg := closeSetup(t, 1, 3*time.Second)
	tier := kafka.TierTopic(topic, time.Hour)
	a.topic(tier, 1)
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}
	src := openSource(t, cfg)
	sink := src.DeadLetter(deadletter.NewMemory(10)).(deadletter.BrokerRetrier)
	e := &heldAt{hold: map[int]bool{2: true}}
	ran := make(chan error, 1)
	go func() { ran <- src.Run(testContext(t), e) }()
	waitFor(t, "three emitted", func() bool { return e.count() == 3 })

	var produces atomic.Int64
	gate := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if produces.Add(1) == 1 {
			c.SleepControl(func() { <-gate })
		}
		return nil, nil, false
	})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := sink.WriteOrRetry(context.Background(), transientEnvelope(e.item(0)))
			assert.NoError(t, err)
			assert.True(t, r)
		}()
	}
	waitWithin(t, 10*time.Second, func() bool { return produces.Load() >= 1 }, func() string { return "no produce" })
	// The second write is under way while the first copy waits for its
	// ack: waiting for the first's copy to end, or (before the fix)
	// copying too.
	waitWithin(t, 10*time.Second, func() bool {
		buf := make([]byte, 1<<20)
		s := string(buf[:runtime.Stack(buf, true)])
		return strings.Count(s, "kafka.retrier.copyOnce(") >= 2 || strings.Count(s, "kafka.(*copier).tierCopy(") >= 2
	}, func() string { return "the second write did not start" })
	close(gate)
	wg.Wait()
	e.settle(0, 1, node.DeadLettered)
	assert.Equal(t, int64(1), tierRecords(t, c, tier), "one record, one tier copy")
	src.Stop()
	require.NoError(t, <-ran)
	require.NoError(t, src.Close(testContext(t)))
}
