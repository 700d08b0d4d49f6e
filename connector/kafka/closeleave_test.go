package kafka_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// countRequests counts the requests of key that c receives, without
// changing how it answers them.
func countRequests(c *kfake.Cluster, key kmsg.Key) *atomic.Int64 {
	var n atomic.Int64
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// awaitClose calls src.Close and returns its error, failing the test when
// it has not returned within 15 s.
func awaitClose(t *testing.T, src *kafka.Source) error {
	t.Helper()
	return closedWithin(t, closeIn(src))
}

// When only the broker's answers to commits are missing, no leave reaches
// the broker (the revoke's commit, made as the client leaves, waits
// behind the first): Close's error says what did not end, not that the
// broker did not answer a leave. (Found by review: it said so.)
func TestCloseErrorNamesTheUnansweredCommit(t *testing.T) {
	c, _, _, cfg := closeSetup(t, 1000, 300*time.Millisecond)
	before := goleak.IgnoreCurrent()
	src := openSource(t, cfg)
	leaves := countRequests(c, kmsg.LeaveGroup)
	_, release := holdRequests(t, c, kmsg.OffsetCommit)
	require.NoError(t, src.Run(testContext(t), &countingEmitter{stop: src.Stop, n: 3}))
	cerr := awaitClose(t, src)
	sent := leaves.Load()
	release()
	require.Error(t, cerr)
	assert.Zero(t, sent, "no leave reached the broker")
	assert.NotContains(t, cerr.Error(), "did not answer the leave")
	assert.Contains(t, cerr.Error(), "did not close within CloseTimeout")
	waitClientGone(t, before)
}

// holdingEmitter settles the first record at once and holds the done of
// the others until settleHeld; it cancels the run at the n-th.
type holdingEmitter struct {
	delivered
	heldDones
	seen   int
	n      int
	cancel context.CancelFunc
}

// heldDones keeps the done funcs of records held, for a test to settle.
type heldDones struct {
	mu   sync.Mutex
	held []func(node.Outcome)
}

// settleHeld delivers the records held.
func (h *heldDones) settleHeld() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, d := range held {
		d(node.Delivered)
	}
}

func (e *holdingEmitter) EmitTracked(_ context.Context, _ kafka.Message, done func(o node.Outcome)) error {
	e.mu.Lock()
	e.seen++
	first, last := e.seen == 1, e.seen == e.n
	if !first {
		e.held = append(e.held, done)
	}
	e.mu.Unlock()
	if first {
		done(node.Delivered)
	}
	if last {
		e.cancel()
	}
	return nil
}

// Records that settle after Close's own commit are committed by the
// revoke of the leave; when the broker does not answer that commit,
// Close must not return nil: records it saw delivered were not
// committed, and the group's next reader reads them again. (Found by
// review: Close returned nil.)
func TestCloseSaysWhenTheLeavesCommitDidNotLand(t *testing.T) {
	c, a, topic, cfg := closeSetup(t, 1000, 300*time.Millisecond)
	before := goleak.IgnoreCurrent()
	src := openSource(t, cfg)
	ctx, cancel := context.WithCancel(testContext(t))
	e := &holdingEmitter{n: 3, cancel: cancel}
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var commits atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if commits.Add(1) == 1 {
			// Close's own commit: the records in flight settle now,
			// after Close took what was due.
			e.settleHeld()
			return nil, nil, false
		}
		c.SleepControl(func() { <-gate }) // the leave's commit is not answered
		return nil, nil, false
	})
	_ = src.Run(ctx, e)
	cerr := awaitClose(t, src)
	got := a.committed(topic, topic)
	release()
	require.Equal(t, map[int32]int64{0: 1}, got, "Close's own commit took the first record only")
	require.Error(t, cerr, "two records settled and were not committed")
	assert.Contains(t, cerr.Error(), "did not close within CloseTimeout")
	waitClientGone(t, before)
}
