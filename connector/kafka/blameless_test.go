package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// Under OnItemFailure DeadLetter, an item that fails blamelessly (a busy
// key: resilience.MarkBlameless) and that its source emitted tracked is
// not dead-lettered: the engine ends it node.Failed and the run goes on,
// counting on its source to deliver it again (pipeline/item.go). The
// source emits the record again in the same run, with Deliveries one
// more, and its partition's commit moves past it: the busy record is
// called twice and the group commits 4 while the run goes on (the test's
// real wait for it is bounded at 10 s, polling the cluster).
func TestBlamelessFailureEmittedAgain(t *testing.T) {
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "busy"), rec(0, "", "a"), rec(0, "", "b"), rec(0, "", "c"))
	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)

	errBusy := errors.New("store: key claimed by another consumer")
	dead := deadletter.NewMemory(10)
	var (
		mu         sync.Mutex
		calls      = map[string]int{}
		deliveries []int
	)
	b := pipeline.New("blameless", pipeline.WithDeadLetter(dead))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		v := string(m.Value)
		calls[v]++
		if v == "busy" {
			deliveries = append(deliveries, m.Deliveries)
		}
		if v == "busy" && calls[v] == 1 {
			return resilience.MarkPermanent(resilience.MarkBlameless(errBusy))
		}
		return nil
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	done := runAsync(t, p, ctx)
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "the records after the busy one stored", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["a"] == 1 && calls["b"] == 1 && calls["c"] == 1
	})
	var busy int
	var committed int64
	waitWithin(t, 10*time.Second, func() bool {
		mu.Lock()
		busy = calls["busy"]
		mu.Unlock()
		committed = a.committed(topic, topic)[0]
		return busy == 2 && committed == 4
	}, func() string {
		return fmt.Sprintf("after 10 s of the run going on: the busy record was called %d time(s) (want 2: delivered again), the group's offset is %d (want 4); dead letters %d",
			busy, committed, dead.Len())
	})
	require.Zero(t, dead.Len(), "a blameless failure is not dead-lettered")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, deliveries, "emitted again with Deliveries one more")
}
