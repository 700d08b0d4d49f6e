package kafka_test

import (
	"context"
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
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// runInto runs a pipeline of src into f and returns the run's result chan.
func runInto(t *testing.T, name string, src *kafka.Source, f func(context.Context, kafka.Message) error, opts ...pipeline.NodeOption) (*pipeline.Pipeline, <-chan error) {
	t.Helper()
	b := pipeline.New(name, pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), f, opts...)
	p, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	return p, done
}

func waitRun(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("run did not end within 20s")
		return nil
	}
}

// Sizes around MaxInFlight, under Keyed and Parallel, ended by Stop and
// by Drain: everything stored, committed to the end.
func TestSizesAroundMaxInFlight(t *testing.T) {
	const mif = 8
	for _, n := range []int{1, mif - 1, mif, mif + 1, 2*mif + 1} {
		for _, mode := range []string{"serial", "keyed", "parallel"} {
			for _, end := range []string{"stop", "drain"} {
				t.Run(fmt.Sprintf("n%d-%s-%s", n, mode, end), func(t *testing.T) {
					t.Parallel()
					a := newAdmin(t, sharedCluster(t, 1))
					topic := uniqueName(t)
					a.topic(topic, 1)
					recs := make([]*kgo.Record, n)
					for i := range recs {
						recs[i] = rec(0, fmt.Sprintf("k%d", i%3), fmt.Sprintf("v%d", i))
					}
					a.produce(topic, recs...)
					cfg := a.config(topic)
					cfg.MaxInFlight = mif
					clock := clockwork.NewFakeClock()
					cfg.Clock = clock
					src, err := kafka.NewSource(cfg)
					require.NoError(t, err)
					var stored atomic.Int64
					var opts []pipeline.NodeOption
					switch mode {
					case "keyed":
						opts = append(opts, pipeline.Keyed(4, func(m kafka.Message) string { return string(m.Key) }))
					case "parallel":
						opts = append(opts, pipeline.Parallel(4), pipeline.Unordered())
					}
					p, done := runInto(t, "sizes", src, func(ctx context.Context, m kafka.Message) error {
						stored.Add(1)
						return nil
					}, opts...)
					waitFor(t, "all stored", func() bool { return stored.Load() == int64(n) })
					if end == "stop" {
						src.Stop()
					} else {
						p.Drain()
					}
					require.NoError(t, waitRun(t, done))
					assert.Equal(t, map[int32]int64{0: int64(n)}, a.committed(topic, topic))
				})
			}
		}
	}
}

// An empty topic then Stop, and Stop before the run starts.
func TestEmptyTopicThenStop(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 2)
	cfg := a.config(topic)
	cfg.Clock = clockwork.NewFakeClock()
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var polled atomic.Int64
	_, done := runInto(t, "empty", src, func(ctx context.Context, m kafka.Message) error { polled.Add(1); return nil })
	// Let it join and poll at least once: wait until the group has a member.
	waitFor(t, "group joined", func() bool {
		gs, err := a.adm.DescribeGroups(testContext(t), topic)
		if err != nil {
			return false
		}
		g := gs[topic]
		return len(g.Members) > 0 && g.State == "Stable"
	})
	src.Stop()
	require.NoError(t, waitRun(t, done))
	assert.Empty(t, a.committed(topic, topic))
}

func TestStopBeforeRun(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 5)...)
	cfg := a.config(topic)
	cfg.Clock = clockwork.NewFakeClock()
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	src.Stop()
	var polled atomic.Int64
	_, done := runInto(t, "stopfirst", src, func(ctx context.Context, m kafka.Message) error { polled.Add(1); return nil })
	require.NoError(t, waitRun(t, done))
	assert.Zero(t, polled.Load())
	assert.Empty(t, a.committed(topic, topic))
}

// Cancelling the run while records are in flight out of order: nothing
// committed past the lowest unsettled.
func TestCancelLeavesUnsettledUncommitted(t *testing.T) {
	for i := 0; i < 2; i++ {
		mode := []string{"keyed", "parallel"}[i]
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t, sharedCluster(t, 1))
			topic := uniqueName(t)
			a.topic(topic, 1)
			recs := make([]*kgo.Record, 10)
			for i := range recs {
				recs[i] = rec(0, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
			}
			a.produce(topic, recs...)
			cfg := a.config(topic)
			clock := clockwork.NewFakeClock()
			cfg.Clock, cfg.CommitEvery, cfg.MaxInFlight = clock, 1, 100
			src, err := kafka.NewSource(cfg)
			require.NoError(t, err)
			var others atomic.Int64
			var opts []pipeline.NodeOption
			if mode == "keyed" {
				opts = append(opts, pipeline.Keyed(4, func(m kafka.Message) string { return string(m.Key) }))
			} else {
				opts = append(opts, pipeline.Parallel(4), pipeline.Unordered())
			}
			b := pipeline.New("cancel", pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
			pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(ctx context.Context, m kafka.Message) error {
				if m.Offset == 2 {
					<-ctx.Done()
					return ctx.Err()
				}
				others.Add(1)
				return nil
			}, opts...)
			p, err := b.Build()
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(testContext(t))
			done := make(chan error, 1)
			go func() { _, err := p.Run(ctx); done <- err }()
			waitWithin(t, 5*time.Second, func() bool { return others.Load() >= 7 }, func() string { return fmt.Sprint("others=", others.Load()) })
			waitFor(t, "commit at 2", func() bool { return a.committed(topic, topic)[0] == 2 })
			cancel()
			_ = waitRun(t, done)
			assert.Equal(t, map[int32]int64{0: 2}, a.committed(topic, topic))
		})
	}
}

// nil key, nil value, empty value, a huge value.
func TestOddRecords(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	huge := make([]byte, 900<<10)
	for i := range huge {
		huge[i] = byte(i)
	}
	a.produce(topic, &kgo.Record{Partition: 0}, &kgo.Record{Partition: 0, Value: []byte{}}, &kgo.Record{Partition: 0, Key: []byte{}, Value: huge},
		&kgo.Record{Partition: 0, Key: []byte("k")})
	cfg := a.config(topic)
	cfg.Clock = clockwork.NewFakeClock()
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	var got []kafka.Message
	_, done := runInto(t, "odd", src, func(ctx context.Context, m kafka.Message) error {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return nil
	}, pipeline.Keyed(2, func(m kafka.Message) string { return string(m.Key) }))
	waitFor(t, "four", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 4 })
	src.Stop()
	require.NoError(t, waitRun(t, done))
	mu.Lock()
	defer mu.Unlock()
	byOff := map[int64]kafka.Message{}
	for _, m := range got {
		byOff[m.Offset] = m
	}
	assert.Nil(t, byOff[0].Key)
	assert.Nil(t, byOff[0].Value)
	assert.Equal(t, huge, byOff[2].Value)
	assert.Equal(t, map[int32]int64{0: 4}, a.committed(topic, topic))
}

// A permanent failure on the last record of a partition (and alone in
// the topic): the run fails, nothing past it is committed, and the next
// run of the same source reads it again.
func TestFailureOnLastRecordHoldsCommit(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t, sharedCluster(t, 1))
			topic := uniqueName(t)
			a.topic(topic, 1)
			a.produce(topic, records(0, n)...)
			cfg := a.config(topic)
			cfg.Clock = clockwork.NewFakeClock()
			src, err := kafka.NewSource(cfg)
			require.NoError(t, err)
			var fails atomic.Int64
			_, done := runInto(t, "faillast", src, func(ctx context.Context, m kafka.Message) error {
				if m.Offset == int64(n-1) {
					fails.Add(1)
					return resilience.MarkPermanent(errBad)
				}
				return nil
			}, pipeline.Keyed(2, func(m kafka.Message) string { return string(m.Key) }))
			err = waitRun(t, done)
			require.Error(t, err)
			assert.Equal(t, int64(n-1), a.committed(topic, topic)[0])
		})
	}
}
