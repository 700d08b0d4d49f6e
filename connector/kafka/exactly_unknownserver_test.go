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

// answerFirstCommitUnknown makes c answer the first EndTxn that commits
// with UNKNOWN_SERVER_ERROR; when commitIt, the broker commits that
// transaction first (the request is passed on to it through another
// client), else it is left open and the broker aborts it later. hit is
// closed once the answer was sent.
func answerFirstCommitUnknown(t *testing.T, c *kfake.Cluster, commitIt bool) (hit <-chan struct{}) {
	t.Helper()
	fwd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(fwd.Close)
	ch := make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || n.Add(1) != 1 {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		if commitIt {
			var ferr error
			c.SleepControl(func() {
				var got kmsg.Response
				got, ferr = fwd.Request(context.Background(), r)
				if ferr == nil {
					if code := got.(*kmsg.EndTxnResponse).ErrorCode; code != 0 {
						ferr = kerr.ErrorForCode(code)
					}
				}
			})
			if ferr != nil {
				t.Errorf("the broker did not commit the transaction: %v", ferr)
			}
		}
		resp.ErrorCode = kerr.UnknownServerError.Code
		close(ch)
		return resp, nil, true
	})
	return ch
}

// A broker that commits a transaction and answers its EndTxn with
// UNKNOWN_SERVER_ERROR (some do) leaves the commit unconfirmed: franz-go
// reports it not committed and rewinds the client to the offsets it last
// saw committed. The source asks the broker which it was: the group's
// committed offsets are the epoch's, so it counts the epoch committed and
// does not read its records again; a read_committed consumer sees each
// output once.
func TestExactlyOnceCommitAnsweredUnknownServerErrorButStored(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	const n = 10
	fillInput(t, addrs, in, n)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
	hit := answerFirstCommitUnknown(t, c, true)
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	a := newAdmin(t, c)
	err := runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		select {
		case <-hit:
		default:
			return false
		}
		return lagOf(t, a, in, in) == 0
	})
	require.NoError(t, err)
	src := eo.Source()
	t.Logf("commits %d, aborts %d, unknowns %d", src.Commits(), src.Aborts(), src.Unknowns())
	checkOnce(t, readCommitted(t, addrs, out, n), n)
	assert.Zero(t, src.Unknowns(), "the broker said what became of the commit")
	assert.Zero(t, src.Aborts(), "the commit the broker stored is not counted aborted")
}

// The same answer when the broker did not commit the transaction: the
// group's offsets are not the epoch's, the epoch is counted aborted, its
// records are read again, and a read_committed consumer sees each output
// once.
func TestExactlyOnceCommitAnsweredUnknownServerErrorNotStored(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	const n = 10
	fillInput(t, addrs, in, n)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
	hit := answerFirstCommitUnknown(t, c, false)
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	a := newAdmin(t, c)
	err := runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		select {
		case <-hit:
		default:
			return false
		}
		return lagOf(t, a, in, in) == 0
	})
	src := eo.Source()
	t.Logf("run error %v; commits %d, aborts %d, unknowns %d", err, src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, err)
	checkOnce(t, readCommitted(t, addrs, out, n), n)
	assert.Positive(t, src.Aborts(), "the epoch the broker did not commit")
}
