package connectortest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errBad   = errors.New("connectortest: bad message")
	errFlaky = errors.New("connectortest: flaky dependency")
)

// A deadLetters is the pipeline's dead-letter sink of a case: it keeps
// the keys of the envelopes, and calls check after each write.
type deadLetters[M any] struct {
	h     Harness[M]
	mu    sync.Mutex
	envs  []deadletter.Envelope
	keys  []string
	check func()
}

func (d *deadLetters[M]) Write(_ context.Context, env deadletter.Envelope) error {
	key := "(not an item of the source)"
	if m, ok := env.Item.(M); ok {
		key = d.h.Message(m).Key
	}
	d.mu.Lock()
	d.envs = append(d.envs, env)
	d.keys = append(d.keys, key)
	d.mu.Unlock()
	if d.check != nil {
		d.check()
	}
	return nil
}

// ended returns how many distinct keys were dead-lettered or stored: a
// case waits until every message it published reached one or the other,
// so that a wrong fate fails it at once rather than at its deadline.
func (d *deadLetters[M]) ended(stored *seen) int {
	d.mu.Lock()
	keys := slices.Clone(d.keys)
	d.mu.Unlock()
	ended := stored.snapshot()
	for _, k := range keys {
		ended[k]++
	}
	return len(ended)
}

func (d *deadLetters[M]) snapshot() ([]string, []deadletter.Envelope) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.keys), slices.Clone(d.envs)
}

// A calls counts the handler's calls of each key.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return c.n[key]
}

func (c *calls) of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// permanentFailure fails one message among good ones with a permanent
// error, with the broker's retry path on: the message is dead-lettered
// once and acked, neither the engine nor the broker retries it, and every
// good message is stored.
func permanentFailure[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 16, Retry: Retry{Delay: 100 * time.Millisecond, MaxRetries: 3}}
	h.CreateQueue(t, cfg)
	good := keys(200)
	h.Publish(t, cfg.Queue, messages(slices.Insert(slices.Clone(good), 100, "bad")...)...)

	stored := newSeen()
	var called calls
	var p *pipeline.Pipeline
	dead := &deadLetters[M]{h: h}
	finished := func() {
		if dead.ended(stored) == len(good)+1 {
			p.Drain()
		}
	}
	dead.check = finished
	c := consumption[M]{h: h, cfg: cfg, dead: dead,
		opts: []pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.NoBackoff()
		})},
		handle: func(_ context.Context, m Message) error {
			called.add(m.Key)
			if m.Key == "bad" {
				return resilience.MarkPermanent(errBad)
			}
			return nil
		},
		store: func(_ context.Context, _ *pipeline.Pipeline, m Message) error {
			stored.add(m.Key)
			finished()
			return nil
		}}
	p = c.build(t)
	_, err := p.Run(ctx)
	require.NoError(t, err)

	keys, envs := dead.snapshot()
	require.Equal(t, []string{"bad"}, keys, "the bad message is dead-lettered, once")
	assert.ErrorIs(t, envs[0].Err, errBad)
	assert.Equal(t, 1, called.of("bad"), "a permanent failure is retried neither in process nor by the broker")
	assert.Len(t, stored.snapshot(), len(good), "every good message is stored")
	requirePending(t, h, cfg.Queue, 0, "the dead-lettered message was acked, not put back nor scheduled for a retry")
}

// poisonMessage puts a message that fails every run it enters (its node's
// failure action is Fail) among good ones, with the poison guard at
// MaxDeliveries = 3 and the connector's default prefetch, so that
// neighbours are in flight each time the poison message fails a run: each
// run fails, and the program runs the same pipeline (the same source)
// again; after three failed runs the source dead-letters the poison
// message, once, as the third failed run ends or at its next delivery,
// and settles it. Its neighbours,
// held when it failed the runs, are not counted with it: every good
// message is stored, none is dead-lettered, and nothing is left. The runs
// are those of one process: what a connector counts across processes is
// its own business, tested by its own tests.
func poisonMessage[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	const maxDeliveries = 3
	cfg := SourceConfig{Queue: queueName(t), MaxDeliveries: maxDeliveries}
	h.CreateQueue(t, cfg)
	good := keys(200)
	h.Publish(t, cfg.Queue, messages(slices.Insert(slices.Clone(good), 100, "poison")...)...)

	stored := newSeen()
	var called calls
	dead := &deadLetters[M]{h: h}
	var p *pipeline.Pipeline
	finished := func() {
		if dead.ended(stored) == len(good)+1 {
			p.Drain()
		}
	}
	dead.check = finished
	c := consumption[M]{h: h, cfg: cfg, dead: dead,
		handle: func(_ context.Context, m Message) error {
			called.add(m.Key)
			if m.Key == "poison" {
				return resilience.MarkPermanent(errBad)
			}
			return nil
		},
		store: func(_ context.Context, _ *pipeline.Pipeline, m Message) error {
			stored.add(m.Key)
			finished()
			return nil
		}}
	p = c.build(t)
	failedRuns := 0
	for run := 1; run <= 2*maxDeliveries; run++ {
		// A source that dead-letters the poison as its third failed run
		// ends leaves no run to make once every good message is stored.
		if dead.ended(stored) == len(good)+1 {
			break
		}
		_, err := p.Run(ctx)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, errBad, "run %d fails only because of the poison message", run)
		failedRuns++
	}
	keys, _ := dead.snapshot()
	require.Equal(t, []string{"poison"}, keys, "the poison message alone is dead-lettered, once")
	assert.Equal(t, maxDeliveries, failedRuns, "each of its first MaxDeliveries deliveries failed one run")
	assert.Equal(t, maxDeliveries, called.of("poison"), "it ran in MaxDeliveries runs, no more")
	assert.Len(t, stored.snapshot(), len(good), "every good message is stored")
	requirePending(t, h, cfg.Queue, 0, "nothing is left in the queue")
}

// brokerRetry runs three messages through the broker's retry path (Delay
// 400 ms, MaxRetries 3), with no in-process retry: one that fails
// transiently on its first two deliveries, one that always does, and a
// good one. The first is stored at its third delivery, the second is
// dead-lettered after its fourth, and every redelivery comes at least the
// delay after the failure that asked for it, and less than three delays
// and a second after it.
func brokerRetry[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	const delay, maxRetries = 400 * time.Millisecond, 3
	// late bounds a redelivery: a broker that honours the delay redelivers
	// within milliseconds of it. The bound stays below a NATS consumer's
	// AckWait in the suite (5 s), so that a connector that never naks with
	// the delay, and lets the ack wait run out, fails.
	const late = 3*delay + time.Second
	cfg := SourceConfig{Queue: queueName(t), Retry: Retry{Delay: delay, MaxRetries: maxRetries}}
	h.CreateQueue(t, cfg)
	h.Publish(t, cfg.Queue, messages("flaky", "doomed", "good")...)

	type call struct {
		start, failed time.Time
		delivery      int
	}
	var (
		mu   sync.Mutex
		hist = map[string][]call{}
	)
	stored := newSeen()
	var p *pipeline.Pipeline
	dead := &deadLetters[M]{h: h}
	finished := func() {
		if dead.ended(stored) == 3 {
			p.Drain()
		}
	}
	dead.check = finished
	c := consumption[M]{h: h, cfg: cfg, dead: dead,
		opts: []pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0
		})},
		handle: func(_ context.Context, m Message) error {
			mu.Lock()
			defer mu.Unlock()
			hist[m.Key] = append(hist[m.Key], call{start: time.Now(), delivery: m.Delivery})
			n := len(hist[m.Key])
			if m.Key == "doomed" || (m.Key == "flaky" && n < 3) {
				hist[m.Key][n-1].failed = time.Now()
				return resilience.MarkTransient(errFlaky)
			}
			return nil
		},
		store: func(_ context.Context, _ *pipeline.Pipeline, m Message) error {
			stored.add(m.Key)
			finished()
			return nil
		}}
	p = c.build(t)
	_, err := p.Run(ctx)
	require.NoError(t, err)

	keys, envs := dead.snapshot()
	require.Equal(t, []string{"doomed"}, keys, "the message that always fails is dead-lettered once, after its last retry")
	assert.ErrorIs(t, envs[0].Err, errFlaky)
	assert.Equal(t, map[string]int{"flaky": 1, "good": 1}, stored.snapshot())
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, hist["good"], 1)
	assert.Len(t, hist["flaky"], 3, "stored at its third delivery")
	assert.Len(t, hist["doomed"], 1+maxRetries, "1 + MaxRetries deliveries")
	for _, k := range []string{"flaky", "doomed"} {
		for i, c := range hist[k] {
			assert.Equal(t, i+1, c.delivery, "%s: delivery %d knows its number", k, i+1)
			if i == 0 {
				continue
			}
			wait := c.start.Sub(hist[k][i-1].failed)
			t.Logf("%s: delivery %d came %s after the failure (delay %s)", k, i+1, wait.Round(time.Millisecond), delay)
			assert.GreaterOrEqual(t, wait, delay, "%s: delivery %d came %s after the failure, not before the delay", k, i+1, wait)
			assert.Less(t, wait, late, "%s: delivery %d came %s after the failure, not later than %s", k, i+1, wait, late)
		}
	}
	requirePending(t, h, cfg.Queue, 0, "nothing is left in the queue or waiting for a retry")
}
