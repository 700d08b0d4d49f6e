package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// echoRecord is the output of an input message: its key and value.
func echoRecord(m kafka.Message) (*kgo.Record, error) {
	return &kgo.Record{Key: m.Key, Value: m.Value}, nil
}

// fillInput writes n records "v<i>" with keys of 32, to topic.
func fillInput(t testing.TB, addrs []string, topic string, n int) {
	fillInputFrom(t, addrs, topic, 0, n)
}

// fillInputFrom writes the records "v<i>" for i in [from, to), keyed as
// fillInput does.
func fillInputFrom(t testing.TB, addrs []string, topic string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%32), Value: fmt.Appendf(nil, "v%d", i)})
	}
	require.NoError(t, cl.ProduceSync(pubContext(t), recs...).FirstErr())
}

// checkOnce asserts that recs, the committed records of the output, hold
// the output of each of the n inputs exactly once.
func checkOnce(t *testing.T, recs []*kgo.Record, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.Value)]++
	}
	for i := range n {
		assert.Equal(t, 1, seen[fmt.Sprintf("v%d", i)], "output of v%d", i)
	}
	assert.Len(t, recs, n, "nothing else")
}

// eoPipeline builds source → apply (Keyed by the record key, so items
// finish out of order) → sink.
func eoPipeline(t testing.TB, eo *kafka.ExactlyOnce[kafka.Message], clock clockwork.Clock,
	apply func(context.Context, kafka.Message) (kafka.Message, error)) *pipeline.Pipeline {
	t.Helper()
	b := pipeline.New("exactly", pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
	in := pipeline.Source(b, "in", eo.Source())
	out := pipeline.Map(b, "apply", in, apply, pipeline.Keyed(4, kafka.RecordKey))
	pipeline.Sink(b, "out", out, eo.Sink(), pipeline.Parallel(4))
	p, err := b.Build()
	require.NoError(t, err)
	return p
}

// runUntil runs p, advancing clock (each epoch's end) until done holds,
// then stops src, and returns Run's error.
func runUntil(t *testing.T, p *pipeline.Pipeline, src *kafka.TransactSource, clock *clockwork.FakeClock, interval time.Duration, done func() bool) error {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		_, err := p.Run(pubContext(t))
		res <- err
	}()
	var err error
	stopped := false
	ticks := 0
	require.Eventually(t, func() bool {
		select {
		case err = <-res:
			return true
		default:
		}
		ticks++
		if !stopped && ticks%10 == 0 && done() {
			src.Stop()
			stopped = true
		}
		clock.Advance(interval)
		return false
	}, pubTimeout, 5*time.Millisecond)
	return err
}

func newEO(t testing.TB, addrs []string, in, out, group, txn string, clock clockwork.Clock) *kafka.ExactlyOnce[kafka.Message] {
	t.Helper()
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: addrs, Topic: in, Group: group,
		TransactionalID: txn, Output: out, Record: echoRecord, Clock: clock, CommitInterval: time.Second,
		// The tests advance clock a second every few milliseconds: the
		// default 30s would call an ack that takes 150 ms of a loaded
		// machine's real time unknown.
		AckTimeout: time.Hour, MaxInFlight: 32})
	require.NoError(t, err)
	return eo
}

// A consume → produce run commits each input's output once, with the
// input's offsets; a run that fails on one record aborts its epoch (its
// outputs are in the topic, aborted, unseen by read_committed consumers),
// and the next run reads the epoch's records again.
func TestExactlyOnceRoundTripAndAbort(t *testing.T) {
	t.Parallel()
	c := shared(t)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 3)
	createTopicOn(t, c, out, 3)
	const n = 120
	fillInput(t, addrs, in, n)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)

	// Run 1 fails on v77, after producing outputs in its epoch.
	var produced atomic.Int64
	fail := func(_ context.Context, m kafka.Message) (kafka.Message, error) {
		if string(m.Value) == "v77" {
			return m, errors.New("v77 refused")
		}
		produced.Add(1)
		return m, nil
	}
	err := runUntil(t, eoPipeline(t, eo, clock, fail), eo.Source(), clock, time.Second, func() bool { return false })
	require.ErrorContains(t, err, "v77 refused")
	assert.Positive(t, eo.Source().Aborts(), "the failed epoch aborted")
	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	a := newAdmin(t, c)
	err = runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		return lagOf(t, a, in, in) == 0
	})
	require.NoError(t, err)
	checkOnce(t, readCommitted(t, addrs, out, n), n)
	assert.Greater(t, countTopic(t, addrs, out), int64(n), "the aborted outputs (and markers) are in the log")
	assert.Zero(t, lagOf(t, a, in, in), "every input offset committed")
	assert.Positive(t, eo.Source().Commits())
}

// readCommitted reads the committed records of topic until it has n, and
// then what more comes within a short real wait: a record committed twice
// would be among them.
func readCommitted(t testing.TB, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cl.Close()
	ctx := pubContext(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records of %s", len(out), n, topic)
		out = append(out, fs.Records()...)
	}
	more, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	for more.Err() == nil {
		out = append(out, cl.PollFetches(more).Records()...)
	}
	return out
}

// A run cancelled mid-epoch, after outputs of the epoch were produced,
// leaves them aborted at Close; the next run produces them again, and a
// read_committed consumer sees each once.
func TestExactlyOnceCancelledRun(t *testing.T) {
	t.Parallel()
	c := shared(t)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 2)
	createTopicOn(t, c, out, 2)
	const n = 40
	fillInput(t, addrs, in, n)
	clock := clockwork.NewFakeClock()
	eo := newEO(t, addrs, in, out, in, in+"-txn", clock)

	// Run 1 holds v30 until the run is cancelled; no epoch ends meanwhile
	// (the clock stands still), so whatever it produced is uncommitted.
	ctx, cancel := context.WithCancel(pubContext(t))
	var passed atomic.Int64
	hold := func(ctx context.Context, m kafka.Message) (kafka.Message, error) {
		if string(m.Value) == "v30" {
			<-ctx.Done()
			return m, context.Cause(ctx)
		}
		passed.Add(1)
		return m, nil
	}
	res := make(chan error, 1)
	go func() {
		_, err := eoPipeline(t, eo, clock, hold).Run(ctx)
		res <- err
	}()
	waitFor(t, "outputs produced in the open epoch", func() bool { return countTopic(t, addrs, out) >= 10 })
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)
	assert.Zero(t, eo.Source().Commits(), "the cancelled epoch did not commit")
	assert.Equal(t, int64(1), eo.Source().Aborts(), "Close aborted it")

	pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
	a := newAdmin(t, c)
	require.NoError(t, runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
		return lagOf(t, a, in, in) == 0
	}))
	checkOnce(t, readCommitted(t, addrs, out, n), n)
}
