package kafka_test

import (
	"context"
	"errors"
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

// An epoch whose commit the broker stored and answered
// UNKNOWN_SERVER_ERROR counts as committed, and the client is set past it;
// the client itself still holds the offsets before it as the group's. A
// later Run that fails (an item refused) aborts its epoch, and the Run
// after it starts from the group's offsets, not the client's: the stored
// epoch's records are not read again, and a read_committed consumer sees
// each output once.
func TestExactlyOnceFailedRunAfterAStoredUnconfirmedCommit(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	fillInputFrom(t, addrs, in, 0, 5)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
	hit := answerNthCommitUnknownStored(t, c, 2)
	a := newAdmin(t, c)
	var stage atomic.Int32
	fail := func(_ context.Context, m kafka.Message) (kafka.Message, error) {
		if string(m.Value) == "v12" {
			return m, errors.New("v12 refused")
		}
		return m, nil
	}
	err := runUntil(t, eoPipeline(t, eo, clock, fail), eo.Source(), clock, time.Second, func() bool {
		switch stage.Load() {
		case 0:
			if lagOf(t, a, in, in) == 0 {
				fillInputFrom(t, addrs, in, 5, 10)
				stage.Store(1)
			}
		case 1:
			select {
			case <-hit:
			default:
				return false
			}
			if lagOf(t, a, in, in) == 0 {
				fillInputFrom(t, addrs, in, 10, 15)
				stage.Store(2)
			}
		}
		return false
	})
	src := eo.Source()
	t.Logf("run 1: %v; commits %d, aborts %d, unknowns %d", err, src.Commits(), src.Aborts(), src.Unknowns())
	require.ErrorContains(t, err, "v12 refused")
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	err = runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		return lagOf(t, a, in, in) == 0
	})
	t.Logf("run 2: %v; commits %d, aborts %d, unknowns %d", err, src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, err)
	checkOnce(t, readCommitted(t, addrs, out, 15), 15)
	assert.Zero(t, src.Unknowns())
}

// answerNthCommitUnknownStored passes the nth committing EndTxn on to the
// broker (which commits) and answers it UNKNOWN_SERVER_ERROR.
func answerNthCommitUnknownStored(t *testing.T, c *kfake.Cluster, nth int32) (hit <-chan struct{}) {
	t.Helper()
	fwd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(fwd.Close)
	ch := make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit {
			return nil, nil, false
		}
		k := n.Add(1)
		if k != nth {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
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
		resp.ErrorCode = kerr.UnknownServerError.Code
		close(ch)
		return resp, nil, true
	})
	return ch
}

// The same, the next epoch's commit answered UNKNOWN_SERVER_ERROR and not
// stored: it aborts within the Run, and the client's rewind is set to the
// group's offsets, after the stored epoch, not to the client's own older
// ones: each output once.
func TestExactlyOnceAbortAfterAStoredUnconfirmedCommit(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	fillInputFrom(t, addrs, in, 0, 5)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
	fwd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(fwd.Close)
	hit2, hit3 := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit {
			return nil, nil, false
		}
		k := n.Add(1)
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		switch k {
		case 2: // stored, answered UNKNOWN_SERVER_ERROR
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
			resp.ErrorCode = kerr.UnknownServerError.Code
			close(hit2)
			return resp, nil, true
		case 4: // (3 was 2 passed on to the broker) not stored, answered UNKNOWN_SERVER_ERROR
			resp.ErrorCode = kerr.UnknownServerError.Code
			close(hit3)
			return resp, nil, true
		}
		return nil, nil, false
	})
	a := newAdmin(t, c)
	var stage atomic.Int32
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	err = runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		switch stage.Load() {
		case 0:
			if lagOf(t, a, in, in) == 0 {
				fillInputFrom(t, addrs, in, 5, 10)
				stage.Store(1)
			}
		case 1:
			select {
			case <-hit2:
			default:
				return false
			}
			if lagOf(t, a, in, in) == 0 {
				fillInputFrom(t, addrs, in, 10, 15)
				stage.Store(2)
			}
		case 2:
			select {
			case <-hit3:
			default:
				return false
			}
			return lagOf(t, a, in, in) == 0
		}
		return false
	})
	src := eo.Source()
	t.Logf("run: %v; commits %d, aborts %d, unknowns %d", err, src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, err)
	checkOnce(t, readCommitted(t, addrs, out, 15), 15)
	assert.Zero(t, src.Unknowns())
	assert.Equal(t, int64(1), src.Aborts(), "the epoch not stored")
}
