package kafka_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// TestStopDrainsAndCommits stops the source while the store holds a
// record: Run returns nil, the records already emitted finish, and Close
// commits them; no record is emitted after Stop's poll ended, and what
// was not emitted stays for the next reader.
func TestStopDrainsAndCommits(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 100)...)
	cfg := a.config(topic)
	cfg.MaxInFlight = 10
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	hold := make(chan struct{})
	var (
		mu     sync.Mutex
		stored []int64
	)
	b := pipeline.New("stop")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(ctx context.Context, m kafka.Message) error {
		if m.Offset == 20 {
			src.Stop()
			select {
			case <-hold:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		stored = append(stored, m.Offset)
		mu.Unlock()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	waitFor(t, "offset 20 in the store", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stored) == 20
	})
	close(hold)
	require.NoError(t, <-done, "a stopped source ends the run cleanly")
	mu.Lock()
	defer mu.Unlock()
	n := int64(len(stored))
	assert.GreaterOrEqual(t, n, int64(21))
	assert.LessOrEqual(t, n, int64(20+cfg.MaxInFlight), "at most what was polled when Stop came")
	for i, o := range stored {
		assert.Equal(t, int64(i), o)
	}
	assert.Equal(t, map[int32]int64{0: n}, a.committed(topic, topic), "everything stored is committed, nothing else")
	assert.NoError(t, src.Run(testContext(t), nil), "a stopped source stays stopped")
}
