package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// With StartAtEnd, a new group's start is committed as soon as the
// first record of a partition arrives, so that a record left unsettled
// is read again by the next Run: a first run whose first record fails
// leaves the start committed, and the next Run reads that record first
// rather than start at the end again and lose it.
func TestStartAtEndFailedFirstRecordReadAgain(t *testing.T) {
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "old"))
	cfg := a.config(topic)
	cfg.StartAtEnd = true
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	errStore := errors.New("store down")
	var (
		mu   sync.Mutex
		run  int
		seen = map[int][]string{}
		p    *pipeline.Pipeline
	)
	b := pipeline.New("start-at-end-failed")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[run] = append(seen[run], string(m.Value))
		if run == 1 {
			return resilience.MarkPermanent(errStore) // the run fails: nothing settles
		}
		p.Drain()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)

	runOnce := func(n int) error {
		mu.Lock()
		run = n
		mu.Unlock()
		done := make(chan error, 1)
		go func() {
			_, err := p.Run(testContext(t))
			done <- err
		}()
		// The source joins in its own time: produce until it reads one.
		ctx := testContext(t)
		for i := 0; ; i++ {
			mu.Lock()
			got := len(seen[n])
			mu.Unlock()
			if got > 0 {
				break
			}
			a.produce(topic, rec(0, "", fmt.Sprintf("run%d-%d", n, i)))
			select {
			case <-ctx.Done():
				t.Fatal("the source read nothing")
			case <-time.After(20 * time.Millisecond): // polling the source's progress
			}
		}
		return <-done
	}
	require.ErrorIs(t, runOnce(1), errStore)
	mu.Lock()
	failed := seen[1][0]
	mu.Unlock()
	t.Logf("committed after the failed run: %v", a.committed(topic, topic))
	require.NoError(t, runOnce(2))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen[2])
	assert.Equal(t, failed, seen[2][0], "the record the first run failed is read again first; run 2 read %v", seen[2])
}
