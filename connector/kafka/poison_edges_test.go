package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// keyedPoisonRun is the poison harness of poison_test.go under
// pipeline.Keyed(2, kafka.RecordKey): each run fails on the record whose
// value is "poison"; the runs go on until every good record is stored and
// the poison dead-lettered.
type keyedPoisonRun struct {
	src    *kafka.Source
	want   int
	dead   *deadletter.Memory
	p      *pipeline.Pipeline
	mu     sync.Mutex
	calls  map[string]int
	stored map[string]int
	order  map[string][]string // per key, the values in the order stored
}

func newKeyedPoisonRun(t *testing.T, cfg kafka.SourceConfig, want int) *keyedPoisonRun {
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	r := &keyedPoisonRun{src: src, want: want, dead: deadletter.NewMemory(10), calls: map[string]int{},
		stored: map[string]int{}, order: map[string][]string{}}
	sink := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		if err := r.dead.Write(ctx, env); err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.doneLocked() {
			r.p.Drain()
		}
		return nil
	})
	b := pipeline.New("poison3", pipeline.WithDeadLetter(sink))
	msgs := pipeline.Source(b, "read", src)
	pipeline.ForEach(b, "store", msgs, func(_ context.Context, m kafka.Message) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		v := string(m.Value)
		r.calls[v]++
		if v == "poison" {
			return resilience.MarkPermanent(errPoison)
		}
		r.stored[v]++
		r.order[string(m.Key)] = append(r.order[string(m.Key)], v)
		if r.doneLocked() {
			r.p.Drain()
		}
		return nil
	}, pipeline.Keyed(2, kafka.RecordKey))
	r.p, err = b.Build()
	require.NoError(t, err)
	return r
}

func (r *keyedPoisonRun) doneLocked() bool { return len(r.stored)+r.dead.Len() == r.want }

// runs runs the pipeline until every record was stored or
// dead-lettered and caught up reports the group committed to the end,
// at most max times, and returns how many runs failed. A record stored
// by a run that then failed may end unsettled (the run's failure reached
// it first), so it is read, and stored, again by the next run: the
// group's offsets catch up only with a run that ends cleanly.
func (r *keyedPoisonRun) runs(t *testing.T, max int, caughtUp func() bool) int {
	failed := 0
	for run := 1; run <= max; run++ {
		r.mu.Lock()
		done := r.doneLocked()
		r.mu.Unlock()
		if done && caughtUp() {
			return failed
		}
		_, err := r.p.Run(testContext(t))
		if err == nil {
			return failed
		}
		require.ErrorIs(t, err, errPoison, "run %d fails only because of the poison", run)
		failed++
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.FailNow(t, "the runs never ended cleanly", "%d runs; calls %v; stored %v; letters %d", max, r.calls, r.stored, r.dead.Len())
	return failed
}

// The poison record is the last record of the burst a Keyed node gets
// (the tail of the topic), and it shares its key with good records
// before it; and, in a second case, good records of its key come after
// it. Every good record is stored, the poison is dead-lettered once after
// MaxDeliveries failed runs, and the group is committed to the end.
func TestPoisonAtAKeyedTailAndBeforeItsKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout []string // key=value
		maxDel int
	}{
		{"tail", []string{"a=a0", "b=b0", "a=a1", "b=b1", "a=poison"}, 3},
		{"tail-md1", []string{"a=a0", "b=b0", "a=a1", "b=b1", "a=poison"}, 1},
		{"shared-key-behind", []string{"a=a0", "a=poison", "a=a1", "b=b0", "a=a2", "b=b1"}, 3},
		{"shared-key-behind-md1", []string{"a=a0", "a=poison", "a=a1", "b=b0", "a=a2", "b=b1"}, 1},
		{"alone", []string{"a=poison"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t, sharedCluster(t, 1))
			topic := uniqueName(t)
			a.topic(topic, 1)
			var recs []*kgo.Record
			for _, kv := range tc.layout {
				var k, v string
				_, err := fmt.Sscanf(kv, "%1s=%s", &k, &v)
				require.NoError(t, err)
				recs = append(recs, rec(0, k, v))
			}
			a.produce(topic, recs...)
			cfg := a.config(topic)
			cfg.MaxDeliveries = tc.maxDel
			r := newKeyedPoisonRun(t, cfg, len(recs))
			failed := r.runs(t, tc.maxDel+4, func() bool { return a.lag(topic, topic) == 0 })
			assert.Equal(t, tc.maxDel, failed, "each of the poison's MaxDeliveries reads failed a run, no more")
			r.mu.Lock()
			assert.Equal(t, tc.maxDel, r.calls["poison"], "the poison is called once per delivery, never after its letter: %v", r.calls)
			assert.Len(t, r.stored, len(recs)-1, "every good record stored: %v", r.stored)
			r.mu.Unlock()
			checkLetter(t, r.dead, topic, tc.maxDel)
			assert.Equal(t, int64(1), r.src.Poisoned())
			// The last commit may land just after Run returned (the
			// leave's, whose client closes in the background): a CI run
			// under load saw a lag of one at once.
			waitWithin(t, 10*time.Second, func() bool { return a.lag(topic, topic) == 0 }, func() string {
				return fmt.Sprintf("not committed to the end, the copies included: lag %d", a.lag(topic, topic))
			})
		})
	}
}
