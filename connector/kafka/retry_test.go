package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// tierRecords returns how many records topic holds, asked of a fresh client
// (a client caches metadata, and a tier may be newer than its cache).
func tierRecords(t testing.TB, c *kfake.Cluster, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(testContext(t), topic)
	require.NoError(t, err)
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// A calls is what a handler saw: per value, the fake time of each call
// and the Deliveries of its Message.
type calls struct {
	mu  sync.Mutex
	at  map[string][]time.Time
	nth map[string][]int
}

func (c *calls) add(v string, at time.Time, deliveries int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at, c.nth = map[string][]time.Time{}, map[string][]int{}
	}
	c.at[v] = append(c.at[v], at)
	c.nth[v] = append(c.nth[v], deliveries)
	return len(c.at[v])
}

func (c *calls) of(v string) ([]time.Time, []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at[v]...), append([]int(nil), c.nth[v]...)
}

// runAsync runs p in a goroutine and returns its end.
func runAsync(t *testing.T, p *pipeline.Pipeline, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx)
		done <- err
	}()
	return done
}

// A hand-off whose wait (5s) is longer than the first tier (1s) goes to
// the next tier (10s), due its wait from the failure, not the tier's
// delay; the record comes back then, resumes its retries where they
// stood, and is stored; the original and the copy are committed.
func TestHandOffSpansTiers(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "k", "flaky"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{time.Second, 10 * time.Second},
		HandOffAfter: time.Second}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	var seen calls
	var p *pipeline.Pipeline
	var resumed []bool
	b := pipeline.New("handoff", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(5 * time.Second)
	}))
	msgs := pipeline.Source(b, "read", src)
	pipeline.ForEach(b, "store", msgs, func(_ context.Context, m kafka.Message) error {
		_, ok := m.Resumed()
		resumed = append(resumed, ok)
		if seen.add(string(m.Value), clock.Now(), m.Deliveries) == 1 {
			return resilience.MarkTransient(errFlaky)
		}
		p.Drain()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))

	tier10, tier1 := kafka.TierTopic(topic, 10*time.Second), kafka.TierTopic(topic, time.Second)
	waitFor(t, "the hand-off's copy in the 10s tier", func() bool { return tierRecords(t, c, tier10) == 1 })
	waitFor(t, "the copy held until due", func() bool { return kafka.HeldInTiers(src) == 1 })
	clock.Advance(5*time.Second - time.Millisecond)
	clock.Advance(time.Millisecond)
	require.NoError(t, <-done)

	at, nth := seen.of("flaky")
	require.Len(t, at, 2, "the failed call, and the one after the hand-off")
	assert.Equal(t, []int{1, 2}, nth, "the copy's delivery goes on from the original's")
	assert.Equal(t, 5*time.Second, at[1].Sub(at[0]), "it came back at its wait, not the tier's delay")
	assert.Equal(t, []bool{false, true}, resumed, "the copy resumes the item retry")
	assert.Zero(t, tierRecords(t, c, tier1), "the 1s tier does not cover 5s")
	assert.Zero(t, a.lag(topic, topic))
	assert.Zero(t, a.lag(topic, tier10), "the copy is committed")
}

// A tier partition whose head is not due does not hold back a due record
// of another partition of the tier; the waiting one comes at its due time.
func TestTierHeadDoesNotBlockOtherPartition(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 2)
	tier := kafka.TierTopic(topic, time.Minute)
	a.topic(tier, 2)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	copyOf := func(p int32, v string, due time.Time) *kgo.Record {
		r := rec(p, "", v)
		r.Headers = []kgo.RecordHeader{
			{Key: kafka.HeaderConsumer, Value: []byte(topic + "/" + topic)},
			{Key: kafka.HeaderDue, Value: []byte(due.Format(time.RFC3339Nano))},
		}
		return r
	}
	a.produce(tier, copyOf(0, "later", clock.Now().Add(30*time.Second)), copyOf(1, "now", clock.Now()))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	var seen calls
	var p *pipeline.Pipeline
	b := pipeline.New("tiers", pipeline.WithClock(clock))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		if seen.add(string(m.Value), clock.Now(), m.Deliveries) == 1 && string(m.Value) == "later" {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	waitFor(t, "the due record of partition 1", func() bool { at, _ := seen.of("now"); return len(at) == 1 })
	waitFor(t, "partition 0's head held", func() bool { return kafka.HeldInTiers(src) == 1 })
	at, _ := seen.of("later")
	assert.Empty(t, at, "not before it is due")
	clock.Advance(30 * time.Second)
	require.NoError(t, <-done)
	at, _ = seen.of("later")
	require.Len(t, at, 1)
	assert.Equal(t, 30*time.Second, at[0].Sub(clock.Now().Add(-30*time.Second)))
	assert.Zero(t, a.lag(topic, tier))
}

// A run cancelled while a record waits in a tier leaves it there,
// uncommitted, and emits nothing of it; the next run emits it once due.
func TestCancelWhileInTier(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	tier := kafka.TierTopic(topic, time.Minute)
	a.topic(tier, 1)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := rec(0, "", "waiting")
	r.Headers = []kgo.RecordHeader{
		{Key: kafka.HeaderConsumer, Value: []byte(topic + "/" + topic)},
		{Key: kafka.HeaderDue, Value: []byte(clock.Now().Add(time.Minute).Format(time.RFC3339Nano))},
		{Key: kafka.HeaderDeliveries, Value: []byte("1")},
	}
	a.produce(tier, r)
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var seen calls
	var p *pipeline.Pipeline
	b := pipeline.New("cancel", pipeline.WithClock(clock))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		seen.add(string(m.Value), clock.Now(), m.Deliveries)
		p.Drain()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(testContext(t))
	done := runAsync(t, p, ctx)
	waitFor(t, "the record held in its tier", func() bool { return kafka.HeldInTiers(src) == 1 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	at, _ := seen.of("waiting")
	assert.Empty(t, at, "nothing of it was emitted")
	assert.Equal(t, int64(1), a.lag(topic, tier), "it is not committed")

	clock.Advance(time.Minute)
	require.NoError(t, <-runAsync(t, p, testContext(t)))
	at, nth := seen.of("waiting")
	assert.Len(t, at, 1, "emitted once by the next run")
	assert.Equal(t, []int{2}, nth)
	assert.Zero(t, a.lag(topic, tier))
}

// The broker's retry path: a record that fails transiently goes to the
// tier of its retry (the n-th retry to the n-th shortest tier), comes
// back at that tier's delay with its delivery counted, and is stored; one
// that always fails goes to the next sink after MaxRetries broker
// retries, its envelope telling every delivery's call.
func TestBrokerRetryThroughTiers(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "flaky"), rec(0, "", "doomed"), rec(0, "", "good"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{2 * time.Second, time.Second},
		MaxRetries: 2}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	var (
		seen   calls
		p      *pipeline.Pipeline
		mu     sync.Mutex
		stored = map[string]int{}
	)
	dead := deadletter.NewMemory(10)
	check := func() {
		if len(stored)+dead.Len() == 3 {
			p.Drain()
		}
	}
	next := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if err := dead.Write(ctx, env); err != nil {
			return err
		}
		check()
		return nil
	})
	b := pipeline.New("broker-retry", pipeline.WithClock(clock), pipeline.WithDeadLetter(src.DeadLetter(next)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.DeadLetter
		}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		v := string(m.Value)
		n := seen.add(v, clock.Now(), m.Deliveries)
		if v == "doomed" || (v == "flaky" && n == 1) {
			return resilience.MarkTransient(errFlaky)
		}
		mu.Lock()
		defer mu.Unlock()
		stored[v]++
		check()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))

	tier1, tier2 := kafka.TierTopic(topic, time.Second), kafka.TierTopic(topic, 2*time.Second)
	waitFor(t, "the first retries in the 1s tier", func() bool { return tierRecords(t, c, tier1) == 2 })
	// The first is held and its partition paused: the second waits in
	// the tier, unfetched, behind it.
	waitFor(t, "the first held", func() bool { return kafka.HeldInTiers(src) == 1 })
	clock.Advance(time.Second)
	waitFor(t, "doomed's second retry in the 2s tier", func() bool { return tierRecords(t, c, tier2) == 1 })
	waitFor(t, "it is held", func() bool { return kafka.HeldInTiers(src) == 1 })
	clock.Advance(2 * time.Second)
	require.NoError(t, <-done)

	assert.Equal(t, map[string]int{"flaky": 1, "good": 1}, stored)
	at, nth := seen.of("flaky")
	require.Len(t, at, 2)
	assert.Equal(t, time.Second, at[1].Sub(at[0]), "the first retry waits the shortest tier")
	assert.Equal(t, []int{1, 2}, nth)
	at, nth = seen.of("doomed")
	require.Len(t, at, 3, "1 + MaxRetries deliveries")
	assert.Equal(t, []int{1, 2, 3}, nth)
	assert.Equal(t, time.Second, at[1].Sub(at[0]))
	assert.Equal(t, 2*time.Second, at[2].Sub(at[1]), "the second retry waits the second tier")
	envs := dead.Envelopes()
	require.Len(t, envs, 1)
	assert.ErrorIs(t, envs[0].Err, errFlaky)
	assert.Equal(t, 3, envs[0].Attempts, "every delivery's call")
	m, ok := envs[0].Item.(kafka.Message)
	require.True(t, ok)
	assert.Equal(t, topic, m.Topic, "the envelope names the record first produced")
	assert.Equal(t, int64(1), m.Offset)
	assert.Zero(t, a.lag(topic, topic))
	assert.Zero(t, a.lag(topic, tier1))
	assert.Zero(t, a.lag(topic, tier2))
}

// A hand-off whose copy gets no answer is unknown, not done: HandOff
// fails, the item stays in process (the node waits its delay itself and
// calls again), and the original is settled only by that call, never as
// handed off.
func TestHandOffUnknownStaysInProcess(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.topic(kafka.TierTopic(topic, 10*time.Second), 1)
	a.produce(topic, rec(0, "k", "flaky"))
	swallowed := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { close(swallowed) })
		return nil, nil, true // taken, never answered
	})
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{10 * time.Second}, HandOffAfter: time.Second}
	// Close flushes the copies' producer, which waits for the unanswered
	// produce until CloseTimeout.
	cfg.CloseTimeout = 500 * time.Millisecond
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var seen calls
	var p *pipeline.Pipeline
	b := pipeline.New("handoff-unknown", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(5 * time.Second)
	}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		if seen.add(string(m.Value), clock.Now(), m.Deliveries) == 1 {
			return resilience.MarkTransient(errFlaky)
		}
		p.Drain()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	<-swallowed
	// The copy's wait for its ack ends on the source's clock; then the
	// node waits its 5s in process. Move the clock on until the second
	// call comes.
	waitFor(t, "the call after the in-process wait", func() bool {
		clock.Advance(time.Second)
		at, _ := seen.of("flaky")
		return len(at) == 2
	})
	require.NoError(t, <-done)
	_, nth := seen.of("flaky")
	assert.Equal(t, []int{1, 1}, nth, "the same delivery, retried in process, not a tier's copy")
	assert.Zero(t, a.lag(topic, topic), "settled by the call that stored it")
}
