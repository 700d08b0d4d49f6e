package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// A commit the broker stores and answers UNKNOWN_SERVER_ERROR, whose
// group offsets then cannot be read (one non-retryable OffsetFetch
// answer), is reported unknown, and the Run fails. franz-go has already
// rewound the client to the offsets before the epoch: a Run again on the
// same source, still open, first sets the client to the group's offsets,
// so it does not read the committed epoch again, and each output is
// committed once.
func TestExactlyOnceRunAgainAfterAnUnknownUnconfirmedCommit(t *testing.T) {
	env := takeoverSetup(t, 3)
	hit := answerFirstCommitUnknown(t, env.c, true)
	var failed atomic.Bool
	env.c.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		select {
		case <-hit:
		default:
			return nil, nil, false
		}
		if !failed.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		return refusedOffsetFetch(req), nil, true
	})
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	run := func(em *countEmitter, stopAt int) error {
		return env.runTicking(t, testContext(t), src, em, func(i int) {
			if i == stopAt {
				src.Stop()
			}
		})
	}
	em1 := &countEmitter{hookEmitter: hookEmitter{sink: env.eo.Sink()}}
	err1 := run(em1, -1) // it ends on its own, with the unknown commit
	t.Logf("run 1: %v; emitted %d; commits %d aborts %d unknowns %d", err1, em1.n.Load(), src.Commits(), src.Aborts(), src.Unknowns())
	t.Logf("run 1 write errors: %v", em1.errs)
	require.ErrorIs(t, err1, kafka.ErrOutcomeUnknown)
	em2 := &countEmitter{hookEmitter: hookEmitter{sink: env.eo.Sink()}}
	err2 := run(em2, 200)
	t.Logf("run 2: %v; emitted %d; commits %d aborts %d unknowns %d", err2, em2.n.Load(), src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, src.Close(context.Background()))
	outs := readCommittedCount(t, env.c.ListenAddrs(), env.out, 2*time.Second)
	t.Logf("read_committed outputs: %d (inputs 3), group offset %d", outs, env.a.committed(env.in, env.in)[0])
	assert.Equal(t, 3, outs, "each input's output once")
	assert.Zero(t, em2.n.Load(), "the committed epoch's records are not emitted again")
}

type countEmitter struct {
	hookEmitter
	n atomic.Int64
}

func (e *countEmitter) EmitTracked(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
	e.n.Add(1)
	return e.hookEmitter.EmitTracked(ctx, m, done)
}

// The client decides on its own not to commit (the TxnOffsetCommit
// answered REBALANCE_IN_PROGRESS), so no commit is sent; the abort's
// EndTxn is answered UNKNOWN_SERVER_ERROR, which franz-go logs as it logs
// a commit answered so. The source knows no commit was sent: it asks
// nothing (the group's offsets, had it asked, would have been refused),
// counts no unknown, and the Run goes on.
func TestExactlyOnceAbortAnsweredUnknownServerErrorIsNoCommit(t *testing.T) {
	env := takeoverSetup(t, 3)
	fwd, err := kgo.NewClient(kgo.SeedBrokers(env.c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(fwd.Close)
	var refused, abortHit, fetchFailed atomic.Bool
	env.c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		if !refused.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		r := req.(*kmsg.TxnOffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition = p.Partition
				sp.ErrorCode = kerr.RebalanceInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	env.c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if r.Commit || !refused.Load() || !abortHit.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		env.c.SleepControl(func() { _, _ = fwd.Request(context.Background(), r) })
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	env.c.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		if !abortHit.Load() || !fetchFailed.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		return refusedOffsetFetch(req), nil, true
	})
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	em := &countEmitter{hookEmitter: hookEmitter{sink: env.eo.Sink()}}
	rerr := env.runTicking(t, testContext(t), src, em, func(int) {
		if abortHit.Load() {
			// The Run went on past the abort: stop it.
			src.Stop()
		}
	})
	t.Logf("run: %v; refused %v abortHit %v fetchFailed %v; commits %d aborts %d unknowns %d", rerr, refused.Load(), abortHit.Load(), fetchFailed.Load(), src.Commits(), src.Aborts(), src.Unknowns())
	require.True(t, abortHit.Load(), "the abort was answered UNKNOWN_SERVER_ERROR")
	assert.False(t, fetchFailed.Load(), "the group's offsets were not asked for")
	assert.Positive(t, src.Aborts())
	require.NoError(t, src.Close(context.Background()))
	assert.NoError(t, rerr, "an abort the client decided on its own is no unknown commit")
	assert.Zero(t, src.Unknowns(), "no commit was sent")
}

// runTicking runs src.Run(ctx, em), advancing env's clock an hour every
// 5 ms of real time and calling onTick(i) after the i-th advance, until
// Run returns, and returns its error; t fails if it does not return
// within 20 s.
func (env *takeoverEnv) runTicking(t *testing.T, ctx context.Context, src *kafka.TransactSource, em node.Emitter[kafka.Message], onTick func(i int)) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- src.Run(ctx, em) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for i := 0; ; i++ {
		select {
		case err := <-res:
			return err
		case <-deadline.C:
			t.Fatal("Run did not return")
		case <-tick.C:
			env.clock.Advance(time.Hour)
			onTick(i)
		}
	}
}
