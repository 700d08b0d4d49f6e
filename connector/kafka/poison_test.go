package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errPoison = errors.New("bad record")
	errFlaky  = errors.New("flaky failure")
)

// poisonRun is a pipeline on one source with the poison guard: a
// sequential store that fails, permanently, the records whose value is
// "poison", and drains once want records are stored or dead-lettered.
type poisonRun struct {
	src   *kafka.Source
	want  int
	dead  *deadletter.Memory
	p     *pipeline.Pipeline
	mu    sync.Mutex
	calls map[string]int
	// stored counts the stores of each value.
	stored map[string]int
}

func newPoisonRun(t *testing.T, cfg kafka.SourceConfig, want int) *poisonRun {
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	r := &poisonRun{src: src, want: want, dead: deadletter.NewMemory(10), calls: map[string]int{}, stored: map[string]int{}}
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
	b := pipeline.New("poison", pipeline.WithDeadLetter(sink))
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
		if r.doneLocked() {
			r.p.Drain()
		}
		return nil
	})
	r.p, err = b.Build()
	require.NoError(t, err)
	return r
}

// doneLocked reports whether every record was stored or dead-lettered.
func (r *poisonRun) doneLocked() bool { return len(r.stored)+r.dead.Len() == r.want }

// runs runs the pipeline until a run ends without error, at most max
// runs, and returns the runs that failed, each because of the poison.
func (r *poisonRun) runs(t *testing.T, max int) int {
	failed := 0
	for run := 1; run <= max; run++ {
		r.mu.Lock()
		done := r.doneLocked()
		r.mu.Unlock()
		if done {
			// Dead-lettered as the last failed run ended: no run is left
			// to make.
			return failed
		}
		_, err := r.p.Run(testContext(t))
		if err == nil {
			return failed
		}
		require.ErrorIs(t, err, errPoison, "run %d fails only because of the poison", run)
		failed++
	}
	require.FailNow(t, "the runs never ended cleanly", "%d runs", max)
	return failed
}

// checkLetter checks the one dead letter: the poison record, ErrPoison,
// and a history that tells each of its failed runs at the store.
func checkLetter(t *testing.T, dead *deadletter.Memory, topic string, runs int) {
	envs := dead.Envelopes()
	require.Len(t, envs, 1, "the poison record alone is dead-lettered, once")
	env := envs[0]
	assert.ErrorIs(t, env.Err, kafka.ErrPoison)
	m, ok := env.Item.(kafka.Message)
	require.True(t, ok, "the item is the Message")
	assert.Equal(t, "poison", string(m.Value))
	assert.Equal(t, topic, m.Topic, "the letter names the record first produced")
	assert.Equal(t, m.CorrelationID(), env.CorrelationID)
	assert.Equal(t, runs, env.Attempts, "one call in each failed run")
	require.Len(t, env.History, runs, "each failed run is told")
	for _, a := range env.History {
		assert.Equal(t, "store", a.Node)
		assert.Contains(t, a.Err, errPoison.Error())
	}
	assert.Equal(t, "store", env.OriginNode)
}

// A lone poison record, the only record of its topic (fewer than a
// fetch), fails MaxDeliveries runs, each counted in a copy, and is then
// dead-lettered once; nothing is left uncommitted, the copies included.
func TestPoisonLoneRecord(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "poison"))
	cfg := a.config(topic)
	cfg.MaxDeliveries = 3
	r := newPoisonRun(t, cfg, 1)
	failed := r.runs(t, 6)
	assert.Equal(t, 3, failed, "each of its first MaxDeliveries reads failed a run")
	assert.Equal(t, 3, r.calls["poison"], "it ran in MaxDeliveries runs, no more")
	checkLetter(t, r.dead, topic, 3)
	assert.Equal(t, int64(1), r.src.Poisoned())
	ends, err := a.adm.ListEndOffsets(testContext(t), topic)
	require.NoError(t, err)
	end, _ := ends.Lookup(topic, 0)
	assert.Equal(t, int64(3), end.Offset, "the record and its two copies, one per failed run before the last, are in the topic")
	assert.Zero(t, a.lag(topic, topic), "the record and its two copies are committed")
}

// A poison record among neighbours: the neighbours are stored once each
// (the store runs in order, so none is stored in a run that the poison
// failed after it), none is dead-lettered or counted with it, and the
// poison is dead-lettered once after MaxDeliveries failed runs.
func TestPoisonAmongNeighbours(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 2)
	var recs []*kgo.Record
	for i := range 60 {
		v := fmt.Sprintf("v%02d", i)
		if i == 25 {
			v = "poison"
		}
		recs = append(recs, rec(int32(i%2), "", v))
	}
	a.produce(topic, recs...)
	cfg := a.config(topic)
	cfg.MaxDeliveries = 2
	r := newPoisonRun(t, cfg, 60)
	failed := r.runs(t, 5)
	assert.Equal(t, 2, failed)
	assert.Equal(t, 2, r.calls["poison"])
	checkLetter(t, r.dead, topic, 2)
	require.Len(t, r.stored, 59, "every neighbour is stored")
	for v, n := range r.stored {
		assert.Equal(t, 1, n, "%s is stored once", v)
	}
	assert.Zero(t, a.lag(topic, topic))
}

// Without a dead-letter sink, a source with the poison guard does not
// open: a poison record would have nowhere to go.
func TestPoisonNeedsDeadLetterSink(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	cfg := a.config(topic)
	cfg.MaxDeliveries = 3
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	err = src.Open(testContext(t))
	require.Error(t, err)
	var ce *kafka.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "MaxDeliveries", ce.Field)
	assert.False(t, resilience.Classifier{}.IsTransient(err), "permanent")
}

// refuseProduces makes c refuse, with a non-retriable error, every
// produce from now on.
func refuseProduces(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return refusal(req.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
	})
}

// A copy the topic refuses leaves the original unsettled, not committed:
// it is read again, and its count of failed runs is kept in the process,
// so that the guard still fires: dead-lettered once after MaxDeliveries
// failed runs, no copy ever stored.
func TestPoisonCopyRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "poison"))
	refuseProduces(c)
	cfg := a.config(topic)
	cfg.MaxDeliveries = 3
	r := newPoisonRun(t, cfg, 1)
	assert.Equal(t, 3, r.runs(t, 6))
	assert.Equal(t, 3, r.calls["poison"])
	checkLetter(t, r.dead, topic, 3)
	assert.Zero(t, a.lag(topic, topic), "committed once dead-lettered")
	ends, err := a.adm.ListEndOffsets(testContext(t), topic)
	require.NoError(t, err)
	end, _ := ends.Lookup(topic, 0)
	assert.Equal(t, int64(1), end.Offset, "no copy was stored")
}

// A copy that a source of another group made, in the topic or in a tier
// the groups share, is not emitted: that group reads it. A record that
// only carries Sluice-* headers of another topic is emitted as any other.
func TestOtherGroupsCopiesSkipped(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	withConsumer := func(v, consumer string) *kgo.Record {
		r := rec(0, "", v)
		r.Headers = []kgo.RecordHeader{{Key: kafka.HeaderConsumer, Value: []byte(consumer)},
			{Key: kafka.HeaderFailures, Value: []byte("2")}}
		return r
	}
	a.produce(topic, rec(0, "", "plain"), withConsumer("theirs", topic+"/other"),
		withConsumer("forwarded", "elsewhere/"+topic), rec(0, "", "last"))
	cfg := a.config(topic)
	cfg.MaxDeliveries = 2
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen []string
		p    *pipeline.Pipeline
	)
	b := pipeline.New("others", pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(m.Value))
		if string(m.Value) == "last" {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"plain", "forwarded", "last"}, seen)
	assert.Zero(t, a.lag(topic, topic), "the other group's copy is committed past")
}
