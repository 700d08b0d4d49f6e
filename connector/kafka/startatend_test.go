package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// TestStartAtEnd: a new group with StartAtEnd skips the records produced
// before it joined and reads those produced after.
func TestStartAtEnd(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "old-0"), rec(0, "", "old-1"), rec(0, "", "old-2"))
	cfg := a.config(topic)
	cfg.StartAtEnd = true
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen []string
	)
	b := pipeline.New("start-at-end")
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		seen = append(seen, string(m.Value))
		mu.Unlock()
		p.Drain()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	// The source joins in its own time: produce until it reads one.
	ctx := testContext(t)
	for i := 0; ; i++ {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n > 0 {
			break
		}
		a.produce(topic, rec(0, "", fmt.Sprintf("new-%d", i)))
		select {
		case <-ctx.Done():
			t.Fatal("the source read nothing")
		case <-time.After(20 * time.Millisecond): // polling the source's progress
		}
	}
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	for _, v := range seen {
		assert.True(t, strings.HasPrefix(v, "new-"), "read %s, produced before the group joined", v)
	}
}
