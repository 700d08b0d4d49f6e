package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// records returns n records of partition p, valued "v<i>".
func records(p int32, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = rec(p, "", fmt.Sprintf("v%d", i))
	}
	return out
}

// TestOutOfOrderCommitsOnlyThePrefix holds the record at offset 3 in
// flight while the nine others of its partition settle: a commit on the
// clock commits offset 3 and not past it; once it settles, the next
// commit is the partition's end.
func TestOutOfOrderCommitsOnlyThePrefix(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 10)...)
	clock := clockwork.NewFakeClock()
	cfg := a.config(topic)
	cfg.Clock, cfg.CommitInterval, cfg.CommitEvery, cfg.MaxInFlight = clock, time.Second, 1000, 100
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	release := make(chan struct{})
	var others atomic.Int64
	b := pipeline.New("out-of-order")
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(ctx context.Context, m kafka.Message) error {
		if m.Offset == 3 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		others.Add(1)
		return nil
	}, pipeline.Parallel(10), pipeline.Unordered())
	p, err = b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	waitFor(t, "nine records settled", func() bool { return others.Load() == 9 })
	assert.Empty(t, a.committed(topic, topic), "no commit before the clock's")
	// The commit ticker, made by the committer's goroutine, is the clock's
	// only waiter: an Advance before it is made would be lost.
	require.NoError(t, clock.BlockUntilContext(testContext(t), 1))
	clock.Advance(cfg.CommitInterval)
	waitFor(t, "a commit", func() bool { return len(a.committed(topic, topic)) > 0 })
	assert.Equal(t, map[int32]int64{0: 3}, a.committed(topic, topic), "the lowest offset not settled")

	close(release)
	waitFor(t, "offset 3 settled and committed", func() bool {
		clock.Advance(cfg.CommitInterval)
		return a.committed(topic, topic)[0] == 10
	})
	p.Drain()
	require.NoError(t, <-done)
	assert.Equal(t, map[int32]int64{0: 10}, a.committed(topic, topic))
}

var errBad = errors.New("bad record")

// TestFailedRecordComesAgain fails the run on the record at offset 5: the
// run commits 0–4, and the next run of the same pipeline starts at
// offset 5, with the record's second delivery counted, and never sees
// 0–4 again.
func TestFailedRecordComesAgain(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 10)...)
	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		seen  []int64
		first = true
		p     *pipeline.Pipeline
		deliv int
	)
	b := pipeline.New("failed", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
	}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Offset == 5 && first {
			first = false
			return resilience.MarkPermanent(errBad)
		}
		if m.Offset == 5 {
			deliv = m.Deliveries
		}
		seen = append(seen, m.Offset)
		if m.Offset == 9 {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.ErrorIs(t, err, errBad)
	assert.Equal(t, []int64{0, 1, 2, 3, 4}, seen)
	assert.Equal(t, map[int32]int64{0: 5}, a.committed(topic, topic), "committed up to the failed record")

	seen = nil
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Equal(t, []int64{5, 6, 7, 8, 9}, seen, "the failed record comes again, the ones before it do not")
	assert.Equal(t, 2, deliv, "its second delivery")
	assert.GreaterOrEqual(t, src.Redelivered(), int64(1), "the failed record, and those after it that the run emitted")
	assert.Equal(t, map[int32]int64{0: 10}, a.committed(topic, topic))
}

// A recordingEmitter is a hand-written node.Emitter for a source run
// without a pipeline: on gets each tracked item and its callback.
type recordingEmitter struct {
	on func(m kafka.Message, done func(node.Outcome))
}

var errUntracked = errors.New("the source emits untracked")

func (e *recordingEmitter) Emit(context.Context, kafka.Message) error { return errUntracked }

func (e *recordingEmitter) EmitAt(context.Context, kafka.Message, []byte) error { return errUntracked }

func (e *recordingEmitter) EmitTracked(_ context.Context, m kafka.Message, done func(node.Outcome)) error {
	e.on(m, done)
	return nil
}

// TestRunAgainStartsFromTheCommit runs the source twice without closing
// it: the second Run reads again what the first left unsettled.
func TestRunAgainStartsFromTheCommit(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 6)...)
	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)
	ctx := testContext(t)
	require.NoError(t, src.Open(ctx))
	defer func() { require.NoError(t, src.Close(ctx)) }()

	// Run 1 settles 0–2 and fails 3; 4 and 5 end Failed with the run.
	runCtx, cancel := context.WithCancel(ctx)
	var got []int64
	em := &recordingEmitter{on: func(m kafka.Message, done func(node.Outcome)) {
		got = append(got, m.Offset)
		if m.Offset < 3 {
			done(node.Delivered)
			return
		}
		done(node.Failed)
		cancel()
	}}
	err = src.Run(runCtx, em)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []int64{0, 1, 2, 3}, got, "nothing is emitted once the run is cancelled")

	got = nil
	runCtx, cancel = context.WithCancel(ctx)
	em.on = func(m kafka.Message, done func(node.Outcome)) {
		got = append(got, m.Offset)
		done(node.Delivered)
		if m.Offset == 5 {
			cancel()
		}
	}
	err = src.Run(runCtx, em)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []int64{3, 4, 5}, got, "the second Run starts at the first record not settled")
	require.NoError(t, src.Close(ctx))
	assert.Equal(t, map[int32]int64{0: 6}, a.committed(topic, topic))
}

// TestCommitsOnTheClock: with a fake clock and no commit by count, what
// settled is committed at the next tick of CommitInterval, not before.
func TestCommitsOnTheClock(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 2)
	a.produce(topic, append(records(0, 5), records(1, 3)...)...)
	clock := clockwork.NewFakeClock()
	cfg := a.config(topic)
	cfg.Clock, cfg.CommitInterval, cfg.CommitEvery, cfg.MaxInFlight = clock, time.Minute, 1000, 100
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var n atomic.Int64
	b := pipeline.New("clock", pipeline.WithClock(clock))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(context.Context, kafka.Message) error {
		n.Add(1)
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	waitFor(t, "every record stored", func() bool { return n.Load() == 8 })
	// The commit ticker is made by the committer's goroutine: an Advance
	// before it is made would be lost.
	require.NoError(t, clock.BlockUntilContext(testContext(t), 1))
	clock.Advance(cfg.CommitInterval - time.Nanosecond)
	assert.Empty(t, a.committed(topic, topic), "no commit before CommitInterval")
	clock.Advance(time.Nanosecond)
	waitFor(t, "the commit of the tick", func() bool { return len(a.committed(topic, topic)) == 2 })
	assert.Equal(t, map[int32]int64{0: 5, 1: 3}, a.committed(topic, topic))
	p.Drain()
	require.NoError(t, <-done)
}
