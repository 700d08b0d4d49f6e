package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// holdEndTxnCommit makes c hold the first EndTxn that commits until
// release is called; held is closed once it arrived.
func holdEndTxnCommit(t *testing.T, c *kfake.Cluster) (held <-chan struct{}, release func()) {
	ch := make(chan struct{})
	finished := make(chan struct{})
	gate := make(chan struct{})
	var once, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(gate) }) }
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !req.(*kmsg.EndTxnRequest).Commit {
			return nil, nil, false
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil, nil, false
		}
		close(ch)
		c.SleepControl(func() { <-gate })
		c.DropControl()
		close(finished)
		return nil, nil, false
	})
	t.Cleanup(func() {
		release()
		select {
		case <-ch:
			<-finished
		default:
		}
	})
	return ch, release
}

// runRecorder is a TransactSource whose Run's error is kept, as the
// pipeline's own error of a cancelled run is the cancel's.
type runRecorder struct {
	*kafka.TransactSource
	err chan error
}

func (r runRecorder) Run(ctx context.Context, out node.Emitter[kafka.Message]) error {
	err := r.TransactSource.Run(ctx, out)
	r.err <- err
	return err
}

// TestExactlyOnceCommitOutcomeUnknownOnCancel: the run is cancelled while
// an epoch's EndTxn(commit) is at the broker, which then commits it. The
// source cannot know whether it committed: it counts the epoch in
// Unknowns, not in Aborts (whose records are read again), its Run's
// error matches ErrOutcomeUnknown, and a restart sees each output once.
func TestExactlyOnceCommitOutcomeUnknownOnCancel(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	const n = 20
	fillInput(t, addrs, in, n)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)
	held, release := holdEndTxnCommit(t, c)

	ctx, cancel := context.WithCancel(pubContext(t))
	defer cancel()
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	src := runRecorder{TransactSource: eo.Source(), err: make(chan error, 1)}
	b := pipeline.New("exactly-unknown", pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
	s := pipeline.Source(b, "in", node.Source[kafka.Message](src))
	pipeline.Sink(b, "out", s, eo.Sink())
	p, err := b.Build()
	require.NoError(t, err)
	res := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx)
		res <- err
	}()
	waitFor(t, "every output produced in the first epoch", func() bool { return countTopic(t, addrs, out) >= n })
	waitFor(t, "the epoch's commit at the broker", func() bool {
		select {
		case <-held:
			return true
		default:
			clock.Advance(time.Second)
			return false
		}
	})
	cancel()
	runErr := <-res
	srcErr := <-src.err
	assert.ErrorIs(t, runErr, context.Canceled, "the pipeline's error is the cancel's")
	assert.ErrorIs(t, srcErr, kafka.ErrOutcomeUnknown, "the source's error says the commit's outcome is unknown")
	commits, aborts, unknowns := eo.Source().Commits(), eo.Source().Aborts(), eo.Source().Unknowns()

	release()
	a := newAdmin(t, c)
	waitFor(t, "the held commit applied", func() bool { return a.committed(in, in)[0] == n })
	assert.Len(t, readCommitted(t, addrs, out, n), n, "the epoch committed after all")
	assert.Zero(t, aborts, "an epoch that may have committed was counted as aborted")
	assert.Zero(t, commits, "no commit was seen to succeed")
	assert.EqualValues(t, 1, unknowns, "the epoch whose commit's outcome is unknown")

	// A restart reads nothing again and sees each output once.
	require.NoError(t, runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		return lagOf(t, a, in, in) == 0
	}))
	checkOnce(t, readCommitted(t, addrs, out, n), n)
}
