package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// partOff is a record's partition and offset.
type partOff struct {
	p int32
	o int64
}

// seenLog records the records a source emitted, settling each at once.
type seenLog struct {
	mu   sync.Mutex
	seen []partOff
}

func (l *seenLog) emitter() *recordingEmitter {
	return &recordingEmitter{on: func(m kafka.Message, done func(node.Outcome)) {
		l.mu.Lock()
		l.seen = append(l.seen, partOff{m.Partition, m.Offset})
		l.mu.Unlock()
		done(node.Delivered)
	}}
}

func (l *seenLog) snapshot() []partOff {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// Records settled and not committed take room (MaxInFlight 2 here), and
// a commit refused leaves them so. When the member then loses its
// partition (its heartbeat is answered UNKNOWN_MEMBER_ID, and it joins
// again), they no longer count: the Run, which waited for room, polls
// again and reads the partition from its committed offset (none: offset
// 0). Before, nothing told the waiting Run that room came back, and it
// stalled until its context ended.
func TestLostPartitionsGiveRoomBack(t *testing.T) {
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 3)...)
	cfg := a.config(topic)
	cfg.Clock, cfg.CommitEvery, cfg.MaxInFlight = clockwork.NewFakeClock(), 1000, 2
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	kafka.AddClientOpts(src, kgo.HeartbeatInterval(50*time.Millisecond))
	var refusing atomic.Bool
	refusing.Store(true)
	var refused, joins atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refusing.Load() {
			refused.Add(1)
			return refuseAll(r.(*kmsg.OffsetCommitRequest)), nil, true
		}
		return nil, nil, false
	})
	ctx := testContext(t)
	require.NoError(t, src.Open(ctx))
	var log seenLog
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- src.Run(runCtx, log.emitter()) }()
	waitWithin(t, 10*time.Second, func() bool { return len(log.snapshot()) == 2 && refused.Load() >= 1 },
		func() string { return fmt.Sprintf("two records settled and a commit refused: read %v", log.snapshot()) })
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		joins.Add(1)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := kmsg.NewPtrHeartbeatResponse()
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	waitWithin(t, 10*time.Second, func() bool { return joins.Load() >= 1 },
		func() string { return "the member joins again after the loss" })
	refusing.Store(false)
	readAgain := func() bool { return slices.Index(log.snapshot()[1:], partOff{0, 0}) >= 0 }
	waitWithin(t, 10*time.Second, readAgain,
		func() string {
			return fmt.Sprintf("the Run did not read offset 0 again after the loss: read %v", log.snapshot())
		})
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled, "the Run ends with its context")
	require.NoError(t, src.Close(context.Background()))
}

// The same with a revoke whose commit is refused: two partitions, a
// record settled in each and not committed (MaxInFlight 2, every commit
// refused); a second member joins and the group revokes one partition.
// The records of the revoked partition no longer take room, so the Run
// reads the record that then comes to the partition it kept.
func TestRevokeWithRefusedCommitGivesRoomBack(t *testing.T) {
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 2)
	a.produce(topic, rec(0, "", "a"), rec(1, "", "b"))
	cfg := a.config(topic)
	cfg.Clock, cfg.CommitEvery, cfg.MaxInFlight = clockwork.NewFakeClock(), 1000, 2
	cfg.CloseTimeout = 3 * time.Second
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var refused atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		refused.Add(1)
		return refuseAll(r.(*kmsg.OffsetCommitRequest)), nil, true
	})
	ctx := testContext(t)
	require.NoError(t, src.Open(ctx))
	var log seenLog
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- src.Run(runCtx, log.emitter()) }()
	waitWithin(t, 10*time.Second, func() bool { return len(log.snapshot()) == 2 && refused.Load() >= 1 },
		func() string { return fmt.Sprintf("two records settled and a commit refused: read %v", log.snapshot()) })
	before := refused.Load()
	joinCooperative(t, c, topic)
	waitWithin(t, 10*time.Second, func() bool { return refused.Load() > before },
		func() string { return "the revoke's commit" })
	a.produce(topic, rec(0, "", "c"), rec(1, "", "d"))
	waitWithin(t, 10*time.Second, func() bool { return len(log.snapshot()) >= 3 },
		func() string {
			return fmt.Sprintf("the Run had room after the revoke and did not read the kept partition's new record: read %v", log.snapshot())
		})
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled, "the Run ends with its context")
	_ = src.Close(context.Background())
	got := log.snapshot()[2]
	require.Equal(t, int64(1), got.o, "the kept partition's new record: %v", log.snapshot())
}
