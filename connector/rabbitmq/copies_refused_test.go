package rabbitmq_test

// The poison guard when its counted copies are refused (issue 26 points 1, 4, 6).

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

type poisonOutcome struct {
	failedRuns int
	seen       int
	written    map[string]int
	dead       []deadletter.Envelope
}

// poisonRuns runs source -> handle -> store up to runs times, a new
// Source each run (as a restarted process would), where handle fails
// every message whose MessageID starts with "poison"; onPoison runs at
// each call on it.
func poisonRuns(t *testing.T, cfg rabbitmq.SourceConfig, runs int, onPoison func(n int), done func(o *poisonOutcome) bool) *poisonOutcome {
	t.Helper()
	var mu sync.Mutex
	o := &poisonOutcome{written: map[string]int{}}
	ctx := testContext(t)
	for run := 1; run <= runs; run++ {
		src, err := rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			o.dead = append(o.dead, env)
			if done(o) {
				src.Stop()
			}
			return nil
		})
		b := pipeline.New("copies", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = resilience.Fail
		}))
		h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
			node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
				if strings.HasPrefix(m.MessageID, "poison") {
					mu.Lock()
					o.seen++
					n := o.seen
					mu.Unlock()
					if onPoison != nil {
						onPoison(n)
					}
					return m, resilience.MarkPermanent(errBad)
				}
				return m, nil
			}))
		pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
			mu.Lock()
			defer mu.Unlock()
			o.written[m.MessageID]++
			if done(o) {
				src.Stop()
			}
			return nil
		}))
		p, err := b.Build()
		require.NoError(t, err)
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = p.Run(runCtx)
		cancel()
		mu.Lock()
		finished := done(o)
		mu.Unlock()
		if finished {
			break
		}
		require.ErrorIs(t, err, errBad, "run %d", run)
		o.failedRuns++
	}
	mu.Lock()
	defer mu.Unlock()
	return o
}

// A poison message whose counted copy the queue refuses is requeued
// uncounted, at the head, at every failed run: the guard never fires, and
// with a prefetch of 1 the message behind it is never reached (issue 26
// point 1/4: a poison message that stalls the queue). The queue is full
// (x-max-length with x-overflow reject-publish): a producer published
// while the poison was out.
func TestPoisonWhoseCopyAFullQueueRefusesIsDeadLettered(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.declareQueue(q, amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	a.publish(q, "poison")
	const maxDeliveries = 3
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, MaxDeliveries: maxDeliveries, Prefetch: 1}
	var once atomic.Bool
	o := poisonRuns(t, cfg, 2*maxDeliveries+1, func(int) {
		if once.CompareAndSwap(false, true) {
			a.publish(q, "good") // the queue is full again
		}
	}, func(o *poisonOutcome) bool { return len(o.dead) == 1 && o.written["good"] == 1 })
	t.Logf("failed runs %d, poison seen %d times, dead %d, written %v", o.failedRuns, o.seen, len(o.dead), o.written)
	assert.Len(t, o.dead, 1, "the poison message is dead-lettered")
	assert.LessOrEqual(t, o.failedRuns, maxDeliveries, "at most MaxDeliveries runs fail")
	assert.Equal(t, 1, o.written["good"], "the message behind it is written")
}

// A poison message with large headers that the broker takes (its header
// frame fits frame_max, 128 KiB) but whose counted copy, with the story
// headers added, does not: the copy fails, the message is requeued
// uncounted, and it fails every run forever.
func TestPoisonWhoseCopyIsTooLargeIsDeadLettered(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	ch := a.channel()
	require.NoError(t, ch.Confirm(false))
	// 131072 less the frame's and properties' overhead, less a margin the
	// copy's headers exceed.
	big := strings.Repeat("h", 131072-600)
	dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{MessageId: "poison", Body: []byte("x"),
		Headers: amqp.Table{"big": big}})
	require.NoError(t, err)
	ok, err := dc.WaitContext(testContext(t))
	require.NoError(t, err)
	require.True(t, ok, "the broker took the message")
	const maxDeliveries = 3
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, MaxDeliveries: maxDeliveries, Prefetch: 1}
	o := poisonRuns(t, cfg, 2*maxDeliveries+1, nil, func(o *poisonOutcome) bool { return len(o.dead) == 1 })
	t.Logf("failed runs %d, poison seen %d times, dead %d", o.failedRuns, o.seen, len(o.dead))
	assert.Len(t, o.dead, 1, "the poison message is dead-lettered")
	assert.LessOrEqual(t, o.failedRuns, maxDeliveries, "at most MaxDeliveries runs fail")
}

// A process killed between the confirm of a poison message's counted
// copy and the ack of the original (acker: recount, then Ack) leaves both
// in the queue: the original, requeued with its old count, and the copy.
// Nothing tells them apart afterwards, so each goes on failing runs with
// its own count: the guard is at least once, and the message is
// dead-lettered twice, never lost (docs/rabbitmq.md, "Poison messages").
// (Simulated: the queue holds what such a kill leaves.)
func TestKillBetweenCopyAndAckIsAtLeastOnce(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	ch := a.channel()
	require.NoError(t, ch.Confirm(false))
	for _, h := range []amqp.Table{
		nil, // the original, requeued
		{rabbitmq.HeaderQueue: q, rabbitmq.HeaderDeliveries: int64(1), rabbitmq.HeaderAttempts: int64(1)}, // its confirmed copy
	} {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{MessageId: "poison", Body: []byte("p"), Headers: h})
		require.NoError(t, err)
		ok, err := dc.WaitContext(testContext(t))
		require.NoError(t, err)
		require.True(t, ok)
	}
	const maxDeliveries = 2
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, MaxDeliveries: maxDeliveries, Prefetch: 1}
	o := poisonRuns(t, cfg, 6, nil, func(o *poisonOutcome) bool { return len(o.dead) == 2 })
	ready, _ := a.depth(q)
	t.Logf("failed runs %d (the killed process's one before), dead letters %d, left %d", o.failedRuns, len(o.dead), ready)
	assert.Len(t, o.dead, 2, "the original and its copy are each dead-lettered: at least once")
	assert.LessOrEqual(t, o.failedRuns, maxDeliveries, "with the killed process's run, at most MaxDeliveries+1 runs fail")
	assert.Zero(t, ready, "nothing is left in the queue")
}

// With MaxDeliveries, a failed run puts back a counted copy of every
// message in flight (Failed ones too), one publish and confirm at a time
// on the acker, and Close gives the acker CloseTimeout (5 s) before it
// aborts the copies still queued: those messages are requeued uncounted.
// With a large prefetch on a durable quorum queue, the poison message's
// own copy can be among those aborted, so its failed run is not counted.
func TestManyCopiesAtCloseCountThePoison(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	_, err := a.channel().QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	a.cleanup([]string{q})
	const prefetch = 3000
	bodies := ids(prefetch)
	bodies[prefetch/2] = "poison"
	a.publish(q, bodies...)
	const maxDeliveries = 2
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, MaxDeliveries: maxDeliveries, Prefetch: prefetch}
	start := time.Now()
	o := poisonRuns(t, cfg, 2*maxDeliveries+1, nil, func(o *poisonOutcome) bool { return len(o.dead) == 1 })
	ready, _ := a.depth(q)
	t.Logf("failed runs %d, poison seen %d, dead %d, written %d, ready %d, in %s", o.failedRuns, o.seen, len(o.dead), len(o.written), ready, time.Since(start))
	assert.LessOrEqual(t, o.failedRuns, maxDeliveries)
}
