package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// TestConsumeCommitsEverything consumes three partitions to the end:
// every record arrives once, with its key, value and headers, and the
// group's committed offsets are the ends of the partitions.
func TestConsumeCommitsEverything(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 3)
	const n = 300
	var recs []*kgo.Record
	for i := range n {
		r := rec(int32(i%3), fmt.Sprintf("k%d", i%7), fmt.Sprintf("v%03d", i))
		r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}}
		recs = append(recs, r)
	}
	a.produce(topic, recs...)

	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen = map[string]kafka.Message{}
	)
	b := pipeline.New("consume")
	msgs := pipeline.Source(b, "consume", src)
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", msgs, func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Value)] = m
		if len(seen) == n {
			p.Drain()
		}
		return nil
	}, pipeline.Keyed(4, kafka.RecordKey))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	require.Len(t, seen, n)
	for i := range n {
		m := seen[fmt.Sprintf("v%03d", i)]
		assert.Equal(t, fmt.Sprintf("k%d", i%7), string(m.Key))
		assert.Equal(t, int32(i%3), m.Partition)
		h, ok := m.Header("h")
		assert.True(t, ok)
		assert.Equal(t, fmt.Sprint(i), string(h))
		assert.Equal(t, 1, m.Deliveries)
	}
	assert.Equal(t, map[int32]int64{0: 100, 1: 100, 2: 100}, a.committed(topic, topic))
}
