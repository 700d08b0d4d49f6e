package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
)

// A Run's context ends while its commit is at the broker: the outcome is
// unknown, and the broker then commits. A Run again on the same source,
// without Close, first ends the transaction the client kept (an abort,
// which leaves the commit standing) and sets the client to the group's
// offsets: it begins transactions again, reads nothing of the committed
// epoch again, and each output is committed once.
func TestExactlyOnceRunAgainAfterACancelledCommit(t *testing.T) {
	env := takeoverSetup(t, 3)
	held, release := holdEndTxnCommit(t, env.c)
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	run := func(ctx context.Context, em *countEmitter, onTick func(i int)) error {
		return env.runTicking(t, ctx, src, em, onTick)
	}
	ctx1, cancel1 := context.WithCancel(testContext(t))
	em1 := &countEmitter{hookEmitter: hookEmitter{sink: env.eo.Sink()}}
	err1 := run(ctx1, em1, func(int) {
		select {
		case <-held:
			cancel1()
		default:
		}
	})
	t.Logf("run 1: %v; emitted %d; commits %d aborts %d unknowns %d", err1, em1.n.Load(), src.Commits(), src.Aborts(), src.Unknowns())
	require.ErrorIs(t, err1, kafka.ErrOutcomeUnknown)
	release()
	require.Eventually(t, func() bool { return env.a.committed(env.in, env.in)[0] == 3 }, 10*time.Second, 10*time.Millisecond)
	em2 := &countEmitter{hookEmitter: hookEmitter{sink: env.eo.Sink()}}
	err2 := run(testContext(t), em2, func(i int) {
		if i == 200 {
			src.Stop()
		}
	})
	t.Logf("run 2: %v; emitted %d; commits %d aborts %d unknowns %d", err2, em2.n.Load(), src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, src.Close(context.Background()))
	outs := readCommittedCount(t, env.c.ListenAddrs(), env.out, 2*time.Second)
	t.Logf("read_committed outputs: %d (inputs 3)", outs)
	assert.NoError(t, err2, "a Run again on the source")
	assert.Equal(t, 3, outs)
	assert.Zero(t, em2.n.Load())
}
