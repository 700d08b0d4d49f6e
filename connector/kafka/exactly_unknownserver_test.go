package kafka_test

import (
	"context"
	"fmt"
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

// answerCommitsUnknown makes c answer with UNKNOWN_SERVER_ERROR the
// EndTxns that commit whose number (from 1, in the order c gets them) is
// a key of plan: the broker commits the transaction first when plan says
// so (the request is passed on to it through another client, and is not
// counted), else it is left open and the broker aborts it later. It
// returns, per key, a channel closed once that answer was sent.
func answerCommitsUnknown(t *testing.T, c *kfake.Cluster, plan map[int32]bool) map[int32]<-chan struct{} {
	t.Helper()
	fwd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(fwd.Close)
	hits := map[int32]chan struct{}{}
	out := map[int32]<-chan struct{}{}
	for k := range plan {
		hits[k] = make(chan struct{})
		out[k] = hits[k]
	}
	var n atomic.Int32
	var forwarding atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || forwarding.Load() {
			return nil, nil, false
		}
		k := n.Add(1)
		store, ok := plan[k]
		if !ok {
			return nil, nil, false
		}
		if store {
			var ferr error
			forwarding.Store(true)
			c.SleepControl(func() {
				var got kmsg.Response
				got, ferr = fwd.Request(context.Background(), r)
				if ferr == nil {
					if code := got.(*kmsg.EndTxnResponse).ErrorCode; code != 0 {
						ferr = kerr.ErrorForCode(code)
					}
				}
			})
			forwarding.Store(false)
			if ferr != nil {
				t.Errorf("the broker did not commit the transaction: %v", ferr)
			}
		}
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		close(hits[k])
		return resp, nil, true
	})
	return out
}

// answerFirstCommitUnknown is answerCommitsUnknown for the first commit.
func answerFirstCommitUnknown(t *testing.T, c *kfake.Cluster, store bool) (hit <-chan struct{}) {
	t.Helper()
	return answerCommitsUnknown(t, c, map[int32]bool{1: store})[1]
}

// A broker that answers a transaction's commit UNKNOWN_SERVER_ERROR (some
// do) leaves it unconfirmed: franz-go reports it not committed and
// rewinds the client to the offsets it last saw committed. The source
// asks the broker which it was. When the broker stored the commit, the
// group's committed offsets are the epoch's: the epoch counts committed
// and its records are not read again. When it did not, the epoch counts
// aborted and its records are read again. Either way a read_committed
// consumer sees each output once.
func TestExactlyOnceCommitAnsweredUnknownServerError(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
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
			hit := answerFirstCommitUnknown(t, c, stored)
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
			assert.Zero(t, src.Unknowns(), "the broker said what became of the commit")
			if stored {
				assert.Zero(t, src.Aborts(), "the commit the broker stored is not counted aborted")
			} else {
				assert.Positive(t, src.Aborts(), "the epoch the broker did not commit")
			}
		})
	}
}
