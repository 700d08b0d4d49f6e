package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// produceSpread writes n records to topic, record i to partition i%parts
// with value "v<i>", and returns the ends of the partitions it wrote.
func produceSpread(a *admin, topic string, parts, n int) map[int32]int64 {
	ends := map[int32]int64{}
	var recs []*kgo.Record
	for i := range n {
		p := int32(i % parts)
		recs = append(recs, rec(p, "", fmt.Sprintf("v%04d", i)))
		ends[p]++
	}
	if n > 0 {
		a.produce(topic, recs...)
	}
	return ends
}

// batchLog checks the batches a node gets: each is of one partition, its
// offsets follow one another, and each partition's batches come in
// order, the first record of one right after the last of the one before.
type batchLog struct {
	t    *testing.T
	mu   sync.Mutex
	next map[int32]int64 // per partition, the offset the next batch starts at
	seen map[string]int  // per value, how often it was handled
	n    int             // records handled
	lens []int
}

func newBatchLog(t *testing.T) *batchLog {
	return &batchLog{t: t, next: map[int32]int64{}, seen: map[string]int{}}
}

// take checks ms and counts its records; it returns how many records
// were handled in all.
func (l *batchLog) take(topic string, ms []kafka.Message) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !assert.NotEmpty(l.t, ms, "an empty batch") {
		return l.n
	}
	p := ms[0].Partition
	assert.Equal(l.t, fmt.Sprintf("%s/%d", topic, p), kafka.BatchKey(ms))
	assert.Equal(l.t, l.next[p], ms[0].Offset, "partition %d: a batch starts at %d, want %d, right after the one before", p, ms[0].Offset, l.next[p])
	for i, m := range ms {
		assert.Equal(l.t, p, m.Partition, "a batch of partition %d holds a record of partition %d", p, m.Partition)
		assert.Equal(l.t, ms[0].Offset+int64(i), m.Offset, "partition %d: offsets of a batch do not follow one another", p)
		l.seen[string(m.Value)]++
	}
	l.next[p] = ms[len(ms)-1].Offset + 1
	l.n += len(ms)
	l.lens = append(l.lens, len(ms))
	return l.n
}

// TestBatchesCarryEachPartitionsRecordsInOrder consumes topics of three
// partitions through Batches, under Keyed(3, BatchKey), for record
// counts around the edges (one, one per partition, fewer than a poll,
// many polls of MaxInFlight 64): every record arrives once, each batch
// holds one partition's records in offset order, a partition's batches
// come in order, and the group commits the ends of the partitions.
func TestBatchesCarryEachPartitionsRecordsInOrder(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	for _, n := range []int{1, 2, 3, 63, 64, 65, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t, c)
			topic := uniqueName(t)
			a.topic(topic, 3)
			ends := produceSpread(a, topic, 3, n)
			cfg := a.config(topic)
			cfg.MaxInFlight = 64
			src, err := kafka.NewSource(cfg)
			require.NoError(t, err)
			log := newBatchLog(t)
			b := pipeline.New("batches")
			var p *pipeline.Pipeline
			pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
				if log.take(topic, ms) == n {
					p.Drain()
				}
				return nil
			}, pipeline.Keyed(3, kafka.BatchKey))
			p, err = b.Build()
			require.NoError(t, err)
			res, err := p.Run(testContext(t))
			require.NoError(t, err)
			require.Len(t, log.seen, n)
			for v, k := range log.seen {
				assert.Equal(t, 1, k, "record %s handled %d times", v, k)
			}
			assert.Equal(t, ends, a.committed(topic, topic))
			for _, s := range res.Nodes {
				if s.Node == "store" {
					assert.Equal(t, int64(len(log.lens)), s.In, "the node's counts are batches")
					assert.Equal(t, int64(len(log.lens)), s.Out, "the node's counts are batches")
				}
			}
			assert.LessOrEqual(t, slices.Max(log.lens), cfg.MaxInFlight, "a batch holds more than MaxInFlight records")
			if n >= 1000 {
				assert.Greater(t, slices.Max(log.lens), 1, "no batch held more than one record")
			}
		})
	}
}

// MaxPollRecords bounds a poll, so a batch, below MaxInFlight's room:
// 500 records of one partition, MaxInFlight 400 and MaxPollRecords 7,
// arrive in batches of at most 7, in order, each once.
func TestBatchesHoldAtMostMaxPollRecords(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	const n = 500
	ends := produceSpread(a, topic, 1, n)
	cfg := a.config(topic)
	cfg.MaxInFlight, cfg.MaxPollRecords = 400, 7
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	log := newBatchLog(t)
	b := pipeline.New("poll")
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		if log.take(topic, ms) == n {
			p.Drain()
		}
		return nil
	}, pipeline.Keyed(2, kafka.BatchKey))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	require.Len(t, log.seen, n)
	assert.Equal(t, 7, slices.Max(log.lens))
	assert.Equal(t, ends, a.committed(topic, topic))
}

// TestBatchDeadLetteredSettlesEveryRecordWithIt fails, permanently, each
// batch that holds v0003 under OnItemFailure DeadLetter: the dead letter
// holds that batch, the other batches are delivered, no record is both
// or neither, and the group commits past every record.
func TestBatchDeadLetteredSettlesEveryRecordWithIt(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	const n = 10
	ends := produceSpread(a, topic, 1, n)
	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)
	dead := deadletter.NewMemory(10)
	var (
		mu        sync.Mutex
		delivered = map[string]bool{}
		failed    = map[string]bool{}
	)
	errBad := errors.New("v0003 does not parse")
	b := pipeline.New("dead", pipeline.WithDeadLetter(dead))
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		bad := slices.ContainsFunc(ms, func(m kafka.Message) bool { return string(m.Value) == "v0003" })
		for _, m := range ms {
			if bad {
				failed[string(m.Value)] = true
			} else {
				delivered[string(m.Value)] = true
			}
		}
		if len(delivered)+len(failed) == n {
			p.Drain()
		}
		if bad {
			return resilience.MarkPermanent(errBad)
		}
		return nil
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)

	envs := dead.Envelopes()
	require.Len(t, envs, 1)
	ms, ok := envs[0].Item.([]kafka.Message)
	require.True(t, ok, "the dead letter holds a %T, want the batch", envs[0].Item)
	var lettered []string
	for _, m := range ms {
		lettered = append(lettered, string(m.Value))
	}
	assert.Contains(t, lettered, "v0003")
	assert.Len(t, lettered, len(failed))
	for _, v := range lettered {
		assert.True(t, failed[v])
		assert.False(t, delivered[v], "%s both delivered and dead-lettered", v)
	}
	assert.Equal(t, n, len(delivered)+len(failed))
	assert.Equal(t, ends, a.committed(topic, topic))
}

// TestBatchThatFailsTheRunIsReadAgain fails the run on the batch of
// partition 1 that holds v0016: the group commits none of that batch, and
// a second run (a new source of the same group) reads it again, so that
// every record is handled, and the group commits every partition's end.
func TestBatchThatFailsTheRunIsReadAgain(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 3)
	const n = 90
	ends := produceSpread(a, topic, 3, n)
	errBad := errors.New("the store refused v0016")

	var (
		mu      sync.Mutex
		handled       = map[string]int{}
		firstOf int64 = -1 // the offset of the first record of the batch that failed
	)
	run := func(fail bool) error {
		src, err := kafka.NewSource(a.config(topic))
		require.NoError(t, err)
		b := pipeline.New("again")
		var p *pipeline.Pipeline
		pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if fail && slices.ContainsFunc(ms, func(m kafka.Message) bool { return string(m.Value) == "v0016" }) {
				firstOf = ms[0].Offset
				return resilience.MarkPermanent(errBad)
			}
			for _, m := range ms {
				handled[string(m.Value)]++
			}
			if len(handled) == n {
				p.Drain()
			}
			return nil
		}, pipeline.Keyed(2, kafka.BatchKey))
		p, err = b.Build()
		require.NoError(t, err)
		_, err = p.Run(testContext(t))
		return err
	}
	err := run(true)
	require.ErrorIs(t, err, errBad)
	mu.Lock()
	require.GreaterOrEqual(t, firstOf, int64(0))
	_, v16 := handled["v0016"]
	mu.Unlock()
	require.False(t, v16)
	assert.LessOrEqual(t, a.committed(topic, topic)[1], firstOf, "the failed batch's records were committed")

	require.NoError(t, run(false))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, handled, n, "records lost")
	assert.Equal(t, ends, a.committed(topic, topic))
}

// TestBatchFailedBlamelesslyIsEmittedAgain fails the batch that holds
// "busy" once, blamelessly, under OnItemFailure DeadLetter: it is not
// dead-lettered, its records come back in the same run, and the group
// commits past them.
func TestBatchFailedBlamelesslyIsEmittedAgain(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "busy"), rec(0, "", "a"), rec(0, "", "b"), rec(0, "", "c"))
	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)
	errBusy := errors.New("store: key claimed by another consumer")
	dead := deadletter.NewMemory(10)
	var (
		mu      sync.Mutex
		calls   int
		handled = map[string]int{}
	)
	b := pipeline.New("blameless", pipeline.WithDeadLetter(dead))
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			require.Equal(t, "busy", string(ms[0].Value))
			return resilience.MarkPermanent(resilience.MarkBlameless(errBusy))
		}
		for _, m := range ms {
			handled[string(m.Value)]++
		}
		if len(handled) == 4 {
			p.Drain()
		}
		return nil
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Zero(t, dead.Len(), "a blameless failure is not dead-lettered")
	assert.Equal(t, map[string]int{"busy": 1, "a": 1, "b": 1, "c": 1}, handled)
	assert.Equal(t, map[int32]int64{0: 4}, a.committed(topic, topic))
}

// TestBatchesWithCrashLedgerHoldOneRecord: with a CrashLedger a record
// may wait for the turn of the one before it, so each batch holds one
// record; every record arrives, in order.
func TestBatchesWithCrashLedgerHoldOneRecord(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 2)
	const n = 40
	ends := produceSpread(a, topic, 2, n)
	cfg := a.config(topic)
	cfg.CrashLedger = filepath.Join(t.TempDir(), "ledger")
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	log := newBatchLog(t)
	b := pipeline.New("ledger", pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		if log.take(topic, ms) == n {
			p.Drain()
		}
		return nil
	}, pipeline.Keyed(2, kafka.BatchKey))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Len(t, log.seen, n)
	assert.Equal(t, 1, slices.Max(log.lens))
	assert.Equal(t, ends, a.committed(topic, topic))
}

// TestBatchesCancelledAtAnyMomentLoseNothing cancels a run after k
// batches were handled (for several k, from the first batch on), with
// batches still being handed over, and runs a new source of the group to
// the end: every record is handled by one of the two runs, and the group
// commits every partition's end. What the first run handled and did not
// commit is handled again (at least once).
func TestBatchesCancelledAtAnyMomentLoseNothing(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	for _, k := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t, c)
			topic := uniqueName(t)
			a.topic(topic, 2)
			const n = 300
			ends := produceSpread(a, topic, 2, n)
			var (
				mu      sync.Mutex
				handled = map[string]bool{}
			)
			run := func(ctx context.Context, cancel func(), stopAfter int) error {
				cfg := a.config(topic)
				cfg.MaxInFlight = 16
				src, err := kafka.NewSource(cfg)
				require.NoError(t, err)
				b := pipeline.New("cancel")
				var p *pipeline.Pipeline
				batches := 0
				pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range ms {
						handled[string(m.Value)] = true
					}
					batches++
					if stopAfter > 0 && batches == stopAfter {
						cancel()
					}
					if stopAfter == 0 && len(handled) == n {
						p.Drain()
					}
					return nil
				}, pipeline.Keyed(2, kafka.BatchKey))
				p, err = b.Build()
				require.NoError(t, err)
				_, err = p.Run(ctx)
				return err
			}
			ctx, cancel := context.WithCancel(testContext(t))
			err := run(ctx, cancel, k)
			require.ErrorIs(t, err, context.Canceled)
			require.NoError(t, run(testContext(t), func() {}, 0))
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, handled, n, "records lost")
			assert.Equal(t, ends, a.committed(topic, topic))
		})
	}
}

// TestBatchesPoisonCountsAgainstEachRecordOfTheBatch: with MaxDeliveries
// 2, the batch that holds a poison record fails two runs; each failed
// run counts against every record of the batch, so each is dead-lettered
// with ErrPoison after the second, the poison with its neighbours. Every
// record is stored or dead-lettered, once, and the group commits past
// them all.
func TestBatchesPoisonCountsAgainstEachRecordOfTheBatch(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	values := []string{"a", "b", "poison", "c", "d"}
	for _, v := range values {
		a.produce(topic, rec(0, "", v))
	}
	cfg := a.config(topic)
	cfg.MaxDeliveries = 2
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu         sync.Mutex
		stored     = map[string]int{}
		withBad    = map[string]bool{} // handled in a batch with the poison
		dead       = deadletter.NewMemory(10)
		p          *pipeline.Pipeline
		doneLocked = func() bool { return len(stored)+dead.Len() == len(values) }
	)
	sink := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		require.NoError(t, dead.Write(ctx, env))
		mu.Lock()
		defer mu.Unlock()
		if doneLocked() {
			p.Drain()
		}
		return nil
	})
	b := pipeline.New("poison", pipeline.WithDeadLetter(sink))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if slices.ContainsFunc(ms, func(m kafka.Message) bool { return string(m.Value) == "poison" }) {
			for _, m := range ms {
				withBad[string(m.Value)] = true
			}
			return resilience.MarkPermanent(errPoison)
		}
		for _, m := range ms {
			stored[string(m.Value)]++
		}
		if doneLocked() {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	failed := 0
	for run := 1; ; run++ {
		require.LessOrEqual(t, run, 5, "the runs never ended cleanly")
		mu.Lock()
		done := doneLocked()
		mu.Unlock()
		if done {
			break
		}
		_, err := p.Run(testContext(t))
		if err == nil {
			break
		}
		require.ErrorIs(t, err, errPoison)
		failed++
	}
	assert.Equal(t, 2, failed)
	mu.Lock()
	defer mu.Unlock()
	lettered := map[string]bool{}
	for _, env := range dead.Envelopes() {
		assert.ErrorIs(t, env.Err, kafka.ErrPoison)
		m, ok := env.Item.(kafka.Message)
		require.True(t, ok, "a poison letter holds its record, a %T here", env.Item)
		v := string(m.Value)
		assert.False(t, lettered[v], "%s dead-lettered twice", v)
		lettered[v] = true
		assert.True(t, withBad[v], "%s was dead-lettered without failing a run", v)
		assert.Zero(t, stored[v], "%s both stored and dead-lettered", v)
	}
	assert.True(t, lettered["poison"])
	assert.Greater(t, len(lettered), 1, "the poison alone was dead-lettered: no neighbour shared its batches")
	for _, v := range values {
		assert.True(t, lettered[v] || stored[v] == 1, "%s neither stored once nor dead-lettered", v)
	}
	assert.Zero(t, a.lag(topic, topic))
}

// A BatchSource hands nothing off: it is not a deadletter.HandOffSource,
// so the pipeline's item retry of a batch waits in process.
func TestBatchesHandNothingOff(t *testing.T) {
	t.Parallel()
	cfg := kafka.SourceConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Group: "g",
		Retry: kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute}, HandOffAfter: time.Second}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	require.Equal(t, time.Second, src.HandOffAfter(), "the Source itself hands off")
	_, ok := any(src.Batches()).(deadletter.HandOffSource)
	assert.False(t, ok)
}

// A batch that fails transiently goes to the retry tier, each record a
// copy. The due gate holds the first copy of the tier's partition, which
// is paused meanwhile, and emits it alone once due; the partition's
// fetching resumes, and the copies after it come with the polls, batched
// as any records. Each record is handled once and every offset, the
// copies' too, is committed.
func TestBatchesTierCopiesComeBack(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	tier := kafka.TierTopic(topic, time.Minute)
	a.topic(tier, 1)
	a.produce(topic, rec(0, "", "a"), rec(0, "", "b"), rec(0, "", "c"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		sizes   []int
		handled = map[string]int{}
		p       *pipeline.Pipeline
	)
	b := pipeline.New("tier", pipeline.WithClock(clock), pipeline.WithDeadLetter(src.DeadLetter(deadletter.NewMemory(10))))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(ms))
		if len(sizes) == 1 {
			return resilience.MarkTransient(errors.New("store: connection reset"))
		}
		for _, m := range ms {
			handled[string(m.Value)]++
		}
		if len(handled) == 3 {
			p.Drain()
		}
		return nil
	}, pipeline.Keyed(2, kafka.BatchKey), pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0 // to the broker's retry at once
		o.OnItemFailure = resilience.DeadLetter
	}))
	p, err = b.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	// Every copy stored before the clock moves: a copy made after would
	// be due a minute after the move.
	waitFor(t, "the three copies in the tier", func() bool { return tierRecords(t, c, tier) == 3 })
	waitFor(t, "the first copy held in its tier", func() bool { return kafka.HeldInTiers(src) == 1 })
	clock.Advance(time.Minute)
	var runErr error
	waitWithin(t, 20*time.Second, func() bool {
		select {
		case runErr = <-done:
			return true
		default:
			return false
		}
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("the run did not end: sizes %v, handled %v, held %d, tier lag %d, topic lag %d",
			sizes, handled, kafka.HeldInTiers(src), a.lag(topic, tier), a.lag(topic, topic))
	})
	require.NoError(t, runErr)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, handled)
	require.GreaterOrEqual(t, len(sizes), 3)
	assert.Equal(t, 3, sizes[0], "the batch")
	assert.Equal(t, 1, sizes[1], "the copy the gate held, alone")
	rest := 0
	for _, n := range sizes[2:] {
		rest += n
	}
	assert.Equal(t, 2, rest, "the copies after it, with the polls")
	assert.Equal(t, map[int32]int64{0: 3}, a.committed(topic, topic))
	assert.Zero(t, a.lag(topic, tier), "the copies are committed")
}

// A batch that fails blamelessly is emitted again behind the batches of
// its partition emitted since, as a record is behind its key's (see
// docs/kafka.md, "Per-key order and RecordKey"): here offsets 2 and 3,
// polled while the batch of 0 and 1 was in its call, are handled before
// 0 and 1 come back. The commit still waits for 0 and 1.
func TestBatchFailedBlamelesslyComesBackBehindItsPartition(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "0"), rec(0, "", "1"))
	src, err := kafka.NewSource(a.config(topic))
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		calls   int
		seen    []int64
		behind  atomic.Bool // the batch of offset 2 was dealt to its key
		p       *pipeline.Pipeline
		errBusy = errors.New("store: key claimed by another consumer")
	)
	key := func(ms []kafka.Message) string {
		if ms[0].Offset == 2 {
			behind.Store(true)
		}
		return kafka.BatchKey(ms)
	}
	b := pipeline.New("order", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src.Batches()), func(_ context.Context, ms []kafka.Message) error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			a.produce(topic, rec(0, "", "2"), rec(0, "", "3"))
			waitFor(t, "the batch of 2 and 3 behind this one", behind.Load)
			return resilience.MarkPermanent(resilience.MarkBlameless(errBusy))
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			seen = append(seen, m.Offset)
		}
		if len(seen) == 4 {
			p.Drain()
		}
		return nil
	}, pipeline.Keyed(2, key), pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Equal(t, []int64{2, 3, 0, 1}, seen)
	assert.Equal(t, map[int32]int64{0: 4}, a.committed(topic, topic))
}
