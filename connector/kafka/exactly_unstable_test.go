package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
)

// unstableOnceAfter answers the first OffsetFetch with RequireStable
// that comes after armed is closed as a real broker does while a
// transaction's markers are still being written: the real answer, every
// partition's error UNSTABLE_OFFSET_COMMIT (retriable).
func unstableOnceAfter(t *testing.T, c *kfake.Cluster, armed <-chan struct{}) *atomic.Int32 {
	t.Helper()
	fwd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(fwd.Close)
	var n atomic.Int32
	c.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.OffsetFetchRequest)
		select {
		case <-armed:
		default:
			return nil, nil, false
		}
		if !r.RequireStable || n.Add(1) != 1 {
			return nil, nil, false
		}
		var got kmsg.Response
		var ferr error
		c.SleepControl(func() { got, ferr = fwd.Request(context.Background(), r) })
		if ferr != nil {
			return nil, ferr, true
		}
		resp := got.(*kmsg.OffsetFetchResponse)
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = kerr.UnstableOffsetCommit.Code
				resp.Topics[i].Partitions[j].Offset = -1
			}
		}
		for g := range resp.Groups {
			for i := range resp.Groups[g].Topics {
				for j := range resp.Groups[g].Topics[i].Partitions {
					resp.Groups[g].Topics[i].Partitions[j].ErrorCode = kerr.UnstableOffsetCommit.Code
					resp.Groups[g].Topics[i].Partitions[j].Offset = -1
				}
			}
		}
		return resp, nil, true
	})
	return &n
}

// A commit answered UNKNOWN_SERVER_ERROR and not stored, whose check of
// the group's offsets is answered UNSTABLE_OFFSET_COMMIT first (as a real
// broker answers while a transaction's markers are written): the source
// asks again, learns the commit was not stored, and aborts the epoch; the
// Run goes on, nothing is unknown, and each output is seen once.
func TestExactlyOnceUnstableOffsetsAreAskedAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	const n = 10
	fillInputFrom(t, addrs, in, 0, 5)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
	hit := answerCommitsUnknown(t, c, map[int32]bool{2: false})[2]
	unst := unstableOnceAfter(t, c, hit)
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	a := newAdmin(t, c)
	err := runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second,
		fillInTurns(t, a, addrs, in, []<-chan struct{}{nil}, hit))
	src := eo.Source()
	t.Logf("unstable answers %d; run error %v; commits %d, aborts %d, unknowns %d", unst.Load(), err, src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, err, "a retriable UNSTABLE_OFFSET_COMMIT turned an abort into a failed Run")
	assert.Zero(t, src.Unknowns())
	assert.Positive(t, unst.Load(), "the unstable answer was given")
	assert.Equal(t, int64(1), src.Aborts(), "the epoch not stored")
	checkOnce(t, readCommitted(t, addrs, out, n), n)
}
