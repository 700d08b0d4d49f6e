package nats_test

// The poison guard when its counted copies are refused (issue 26 points 1, 4, 6).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// poisonRuns runs a pipeline source -> handle -> store up to runs times
// (Run called again after each failed run, as TestLonePoisonIsDeadLettered
// does), where handle fails every message whose data starts with "poison".
// It returns the failed runs, the data seen by handle, what was written
// and what was dead-lettered.
type poisonOutcome struct {
	failedRuns int
	seen       []string
	written    map[string]int
	dead       []deadletter.Envelope
}

func poisonRuns(t *testing.T, cfg nats.SourceConfig, runs int, want func(o *poisonOutcome) bool) *poisonOutcome {
	t.Helper()
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	o := &poisonOutcome{written: map[string]int{}}
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		o.dead = append(o.dead, env)
		return nil
	})
	b := pipeline.New("copies", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	handled := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[nats.Message, nats.Message](func(_ context.Context, m nats.Message) (nats.Message, error) {
			mu.Lock()
			o.seen = append(o.seen, string(m.Data[:min(len(m.Data), 16)]))
			mu.Unlock()
			if strings.HasPrefix(string(m.Data), "poison") {
				return m, resilience.MarkPermanent(errPoisonous)
			}
			return m, nil
		}))
	pipeline.ForEach(b, "store", handled, func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		o.written[string(m.Data[:min(len(m.Data), 16)])]++
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	ctx := testContext(t)
	for run := 1; run <= runs; run++ {
		runCtx, cancel := context.WithTimeout(ctx, 8*time.Second)
		go func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				mu.Lock()
				ok := want(o)
				mu.Unlock()
				if ok {
					p.Drain()
					return
				}
			}
		}()
		_, err := p.Run(runCtx)
		cancel()
		mu.Lock()
		ok := want(o)
		mu.Unlock()
		if err == nil || ok {
			break
		}
		require.ErrorIs(t, err, errPoisonous, "run %d", run)
		o.failedRuns++
	}
	mu.Lock()
	defer mu.Unlock()
	return o
}

// A poison message in a stream that cannot store its counted copy: the
// guard never counts a run, and the message fails every run, forever
// (issue 26 point 1: "The guard must fire after MaxDeliveries failed runs
// whatever the backlog and Batch"). Two ordinary setups where the copy is
// refused: a stream whose MaxMsgSize the message fits but its copy (the
// story headers added) does not, and a consumer on a mirror, which takes
// no publishes (the copy goes to the subject with Nats-Expected-Stream
// set to the mirror).
func TestPoisonWhoseCopyIsRefusedIsDeadLettered(t *testing.T) {
	t.Parallel()
	const maxDeliveries = 3
	t.Run("MaxMsgSize", func(t *testing.T) {
		t.Parallel()
		a := newAdmin(t)
		name := uniqueName(t)
		a.cleanup(name)
		_, err := a.js.CreateStream(testContext(t), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Storage: jetstream.MemoryStorage, MaxMsgSize: 1024})
		require.NoError(t, err)
		_, err = a.js.PublishMsg(testContext(t), &natsgo.Msg{Subject: name + ".in", Data: []byte("poison-" + strings.Repeat("x", 800))})
		require.NoError(t, err, "the message fits the stream's MaxMsgSize")
		cfg := a.config(name)
		cfg.MaxDeliveries, cfg.AckWait = maxDeliveries, 3*time.Second
		o := poisonRuns(t, cfg, 2*maxDeliveries+1, func(o *poisonOutcome) bool { return len(o.dead) == 1 })
		t.Logf("failed runs %d, seen %d times, dead letters %d", o.failedRuns, len(o.seen), len(o.dead))
		assert.Len(t, o.dead, 1, "the poison message is dead-lettered after MaxDeliveries failed runs")
		assert.LessOrEqual(t, o.failedRuns, maxDeliveries, "at most MaxDeliveries runs fail")
	})
	t.Run("MirrorRefusedAtOpen", func(t *testing.T) {
		t.Parallel()
		a := newAdmin(t)
		origin := uniqueName(t)
		subject := a.stream(origin)
		mirror := origin + "-m"
		a.cleanup(mirror)
		_, err := a.js.CreateStream(testContext(t), jetstream.StreamConfig{Name: mirror, Storage: jetstream.MemoryStorage,
			Mirror: &jetstream.StreamSource{Name: origin}})
		require.NoError(t, err)
		a.publish(subject, "poison")
		waitFor(t, "the mirror holds the message", func() bool { return a.messages(mirror) == 1 })
		// A mirror takes no copy: the guard could count only in process,
		// so Open refuses it, naming the field and why.
		cfg := a.config(mirror)
		cfg.MaxDeliveries = maxDeliveries
		src, err := nats.NewSource(cfg)
		require.NoError(t, err)
		src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
		err = src.Open(testContext(t))
		var ce *nats.ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "MaxDeliveries", ce.Field)
		assert.Contains(t, ce.Reason, "mirror")
		assert.False(t, resilience.IsTransient(err))
		require.NoError(t, src.Close(testContext(t)))
	})
}

// A message published with a Sluice-Consumer header that names a consumer
// of ANOTHER stream (as a message forwarded with its headers from a
// pipeline that consumed a counted copy there carries it) is acked and
// never emitted: it is lost silently, counted nowhere. A copy this source
// could skip must be one of its own stream; a message of another stream
// cannot be a copy published for a consumer of this one.
func TestForwardedCopyHeadersAreEmitted(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	ctx := testContext(t)
	// A copy as a source of stream "orders", consumer "worker", publishes
	// it, forwarded with its headers by a pipeline into this stream.
	h := natsgo.Header{}
	h.Set(nats.HeaderConsumer, "orders/worker")
	h.Set(nats.HeaderFailures, "1")
	h.Set(nats.HeaderSequence, "42")
	_, err := a.js.PublishMsg(ctx, &natsgo.Msg{Subject: subject, Header: h, Data: []byte("good-forwarded")})
	require.NoError(t, err)
	a.publish(subject, "good-plain")

	cfg := a.config(name)
	cfg.MaxDeliveries = 3
	o := poisonRuns(t, cfg, 1, func(o *poisonOutcome) bool {
		return len(o.written) == 2 || (len(o.written) == 1 && a.consumerAcked(name) == 2)
	})
	t.Logf("seen %v, written %v", o.seen, o.written)
	assert.Equal(t, 1, o.written["good-forwarded"], "the forwarded message is written")
	assert.Equal(t, 1, o.written["good-plain"])
}

// A poison letter's message, a counted copy at its last count, given back
// to its stream through nats.Republishing (as a re-drive does, from the
// Message or from its JSON in a dead-letter file) runs again: Republishing
// drops the copy's Sluice-* and Nats-* headers, which would have the
// source dead-letter it again at once, without running it.
func TestRedrivenPoisonRunsAgain(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	ctx := testContext(t)
	h := natsgo.Header{}
	h.Set(nats.HeaderConsumer, name+"/"+name)
	h.Set(nats.HeaderFailures, "3")
	h.Set(nats.HeaderSequence, "1")
	h.Set(jetstream.MsgIDHeader, fmt.Sprintf("sluice:%s/%s:1:3", name, name))
	h.Set(jetstream.ExpectedStreamHeader, name)
	h.Set("Order", "fixed-now")
	letter := nats.Message{Subject: subject, Data: []byte("fixed-now"), Header: h, Stream: name, Sequence: 1}
	for _, item := range []any{letter, mustJSON(t, letter)} {
		msg, err := nats.Republishing(deadletter.Envelope{Item: item, ItemType: deadletter.TypeOf(letter)})
		require.NoError(t, err)
		assert.Equal(t, subject, msg.Subject)
		assert.Equal(t, "fixed-now", msg.Header.Get("Order"), "the message's own headers stay")
		assert.Empty(t, msg.Header.Get(nats.HeaderFailures))
		assert.Empty(t, msg.Header.Get(jetstream.MsgIDHeader))
	}
	msg, err := nats.Republishing(deadletter.Envelope{Item: letter})
	require.NoError(t, err)
	_, err = a.js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	cfg := a.config(name)
	cfg.MaxDeliveries = 3
	o := poisonRuns(t, cfg, 1, func(o *poisonOutcome) bool { return len(o.written)+len(o.dead) == 1 })
	t.Logf("seen %v, written %v, dead %d", o.seen, o.written, len(o.dead))
	assert.Equal(t, 1, o.written["fixed-now"], "a re-driven message runs again")
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// consumerAcked returns the consumer's ack floor (stream sequence).
func (a *admin) consumerAcked(name string) uint64 {
	return a.consumer(name, name).AckFloor.Stream
}

// On a stream that keeps the last message of each subject
// (MaxMsgsPerSubject 1, as a stream of the latest state per key is set
// up), the counted copy of a message that failed a run is published to
// the message's subject: it evicts a newer message of that subject that
// the consumer has not received yet. The newer message is lost, the older
// (poison) one takes its place. Without MaxDeliveries the nak'd message
// (already evicted by the newer one) is not delivered again, and the
// newer one is.
func TestCopyNeverEvictsANewerMessageOfItsSubject(t *testing.T) {
	t.Parallel()
	t.Run("MaxDeliveries0", func(t *testing.T) {
		t.Parallel()
		copyEvicts(t, 0)
	})
	// With the guard, the copy would evict the newer message: Open
	// refuses it, naming the field and why.
	t.Run("MaxDeliveries3RefusedAtOpen", func(t *testing.T) {
		t.Parallel()
		a := newAdmin(t)
		name := uniqueName(t)
		a.cleanup(name)
		_, err := a.js.CreateStream(testContext(t), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Storage: jetstream.MemoryStorage, MaxMsgsPerSubject: 1})
		require.NoError(t, err)
		cfg := a.config(name)
		cfg.MaxDeliveries = 3
		src, err := nats.NewSource(cfg)
		require.NoError(t, err)
		src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
		err = src.Open(testContext(t))
		var ce *nats.ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "MaxDeliveries", ce.Field)
		assert.Contains(t, ce.Reason, "MaxMsgsPerSubject")
		assert.False(t, resilience.IsTransient(err))
		require.NoError(t, src.Close(testContext(t)))
	})
}

func copyEvicts(t *testing.T, md int) {
	a := newAdmin(t)
	name := uniqueName(t)
	a.cleanup(name)
	_, err := a.js.CreateStream(testContext(t), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
		Storage: jetstream.MemoryStorage, MaxMsgsPerSubject: 1})
	require.NoError(t, err)
	subject := name + ".key-1"
	a.publish(subject, "poison-v1")
	cfg := a.config(name)
	cfg.MaxDeliveries, cfg.Batch, cfg.AckWait = md, 1, 3*time.Second
	var once sync.Once
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		written []string
		dead    int
		moved   = make(chan struct{}, 1) // a dead letter or a write happened
	)
	nudge := func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	}
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		mu.Lock()
		dead++
		mu.Unlock()
		nudge()
		t.Logf("dead letter: %s (%s)", env.ErrText, env.OriginNode)
		return nil
	})
	b := pipeline.New("latest", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[nats.Message, nats.Message](func(_ context.Context, m nats.Message) (nats.Message, error) {
			if strings.HasPrefix(string(m.Data), "poison") {
				// The producer sends the key's newer state meanwhile.
				once.Do(func() { a.publish(subject, "good-v2") })
				return m, resilience.MarkPermanent(errPoisonous)
			}
			return m, nil
		}))
	pipeline.ForEach(b, "store", h, func(_ context.Context, m nats.Message) error {
		mu.Lock()
		written = append(written, string(m.Data))
		mu.Unlock()
		nudge()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	for run := 1; run <= 5; run++ {
		ctx, cancel := context.WithTimeout(testContext(t), 4*time.Second)
		go func() {
			for ctx.Err() == nil {
				mu.Lock()
				ok := dead == 1 || len(written) > 0
				mu.Unlock()
				if ok {
					p.Drain()
					return
				}
				select {
				case <-moved:
				case <-ctx.Done():
				}
			}
		}()
		_, err := p.Run(ctx)
		cancel()
		t.Logf("run %d: %v", run, err)
		mu.Lock()
		ok := dead == 1 && len(written) > 0
		mu.Unlock()
		if err == nil || ok {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("written %v, dead letters %d, stream holds %d", written, dead, a.messages(name))
	assert.Contains(t, written, "good-v2", "the key's newer message is written")
}
