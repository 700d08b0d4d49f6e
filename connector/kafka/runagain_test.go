package kafka_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A Run that ended with a transient error (the group answered a commit
// ILLEGAL_GENERATION: ErrConnectionLost), one record still in flight, is
// followed by a Run on the same source without Close and Open: it starts
// from the committed offset, reads the record in flight and the rest, and
// a late settle of the first Run's record moves nothing back; Close
// commits the end.
func TestRunAgainAfterATransientError(t *testing.T) {
	t.Parallel()
	a, topic, src := fencedSource(t, 6)
	ctx := testContext(t)

	var (
		mu    sync.Mutex
		held  func(node.Outcome)
		first []int64
	)
	em := &recordingEmitter{on: func(m kafka.Message, done func(node.Outcome)) {
		mu.Lock()
		defer mu.Unlock()
		first = append(first, m.Offset)
		if m.Offset == 3 {
			held = done
			return
		}
		done(node.Delivered)
	}}
	err := src.Run(ctx, em)
	require.ErrorIs(t, err, kafka.ErrConnectionLost)
	t.Logf("first run emitted %v, ended %v; committed %v", first, err, a.committed(topic, topic))

	runCtx, cancel := context.WithCancel(ctx)
	var second []int64
	em.on = func(m kafka.Message, done func(node.Outcome)) {
		mu.Lock()
		second = append(second, m.Offset)
		h := held
		held = nil
		mu.Unlock()
		if h != nil {
			h(node.Delivered) // the first Run's record settles late
		}
		done(node.Delivered)
		if m.Offset == 5 {
			cancel()
		}
	}
	err = src.Run(runCtx, em)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, src.Close(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, second)
	assert.LessOrEqual(t, second[0], int64(3), "the second Run starts at or before the record left in flight: %v", second)
	assert.Equal(t, int64(5), second[len(second)-1])
	seen := map[int64]bool{}
	for _, o := range append(append([]int64(nil), first...), second...) {
		seen[o] = true
	}
	assert.Len(t, seen, 6, "every record read: first %v second %v", first, second)
	assert.Equal(t, map[int32]int64{0: 6}, a.committed(topic, topic))
}

// fenceFirstCommit answers the first OffsetCommit ILLEGAL_GENERATION, as
// fencedSource opens a source (CommitEvery 2) of a new one-partition
// topic holding n records, on a cluster whose group answers the first
// commit ILLEGAL_GENERATION.
func fencedSource(t *testing.T, n int) (*admin, string, *kafka.Source) {
	t.Helper()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, n)...)
	fenceFirstCommit(c)
	cfg := a.config(topic)
	cfg.CommitEvery = 2
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	require.NoError(t, src.Open(testContext(t)))
	return a, topic, src
}

// a group that dropped the member does.
func fenceFirstCommit(c *kfake.Cluster) {
	var fenced atomic.Bool
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !fenced.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = r.Version
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.IllegalGeneration.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// The ErrConnectionLost that ends a Run after a fenced commit is
// documented as transient (docs/kafka.md, "Settled records and committed
// offsets"; "Connection loss": "ends Run with an error matching
// kafka.ErrConnectionLost, marked transient"): the default classifier must
// say so, or a supervisor that retries transient errors gives up.
func TestFencedCommitErrorIsTransient(t *testing.T) {
	t.Parallel()
	_, _, src := fencedSource(t, 4)
	ctx := testContext(t)
	defer func() { _ = src.Close(ctx) }()
	err := src.Run(ctx, &recordingEmitter{on: func(_ kafka.Message, done func(node.Outcome)) { done(node.Delivered) }})
	require.ErrorIs(t, err, kafka.ErrConnectionLost)
	assert.True(t, resilience.IsTransient(err), "ErrConnectionLost after a fenced commit is transient: %v", err)
}
