package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	hit := answerCommitsUnknown(t, c, map[int32]bool{2: true})[2]
	a := newAdmin(t, c)
	fail := func(_ context.Context, m kafka.Message) (kafka.Message, error) {
		if string(m.Value) == "v12" {
			return m, errors.New("v12 refused")
		}
		return m, nil
	}
	err := runUntil(t, eoPipeline(t, eo, clock, fail), eo.Source(), clock, time.Second,
		fillInTurns(t, a, addrs, in, []<-chan struct{}{nil, hit}, nil))
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
	hits := answerCommitsUnknown(t, c, map[int32]bool{2: true, 3: false})
	a := newAdmin(t, c)
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	err := runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second,
		fillInTurns(t, a, addrs, in, []<-chan struct{}{nil, hits[2]}, hits[3]))
	src := eo.Source()
	t.Logf("run: %v; commits %d, aborts %d, unknowns %d", err, src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, err)
	checkOnce(t, readCommitted(t, addrs, out, 15), 15)
	assert.Zero(t, src.Unknowns())
	assert.Equal(t, int64(1), src.Aborts(), "the epoch not stored")
}

// fillInTurns returns the done function of runUntil for a test that
// fills its input five records at a time (the first five filled before):
// each time the group has read every record (lag 0) and the turn's hit
// (nil: none) was answered, it fills the next five; after the last turn
// it is done once end (nil: never) was answered and the lag is 0.
func fillInTurns(t *testing.T, a *admin, addrs []string, in string, hits []<-chan struct{}, end <-chan struct{}) func() bool {
	turn := 0
	closed := func(ch <-chan struct{}) bool {
		if ch == nil {
			return true
		}
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	return func() bool {
		if turn < len(hits) {
			if closed(hits[turn]) && lagOf(t, a, in, in) == 0 {
				turn++
				fillInputFrom(t, addrs, in, 5*turn, 5*turn+5)
			}
			return false
		}
		return end != nil && closed(end) && lagOf(t, a, in, in) == 0
	}
}
