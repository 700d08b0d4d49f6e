package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// TestLeftoversOfAKeptQueueDoNotHideTheRun runs the sample on a kept queue
// (-keep) that holds messages an earlier, interrupted run left. Every run
// named its messages msg-0 to msg-<n-1>: the idempotent sink skipped the
// run's own messages as duplicates of the leftovers, and the run could stop
// before consuming its own. Now each run names its messages after itself:
// it delivers its n, and counts the leftovers apart.
func TestLeftoversOfAKeptQueueDoNotHideTheRun(t *testing.T) {
	url := servicetest.RabbitMQ(t)
	var out bytes.Buffer
	cfg := smallCfg(url, randomQueue("leftover"), &out)
	cfg.keep = true
	t.Cleanup(func() {
		deleteTopology(url, cfg.queue, rabbitmq.RetryTopology{Enabled: true, MaxRetry: cfg.maxRetry, Delays: cfg.delays}, false)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := run(ctx, cfg) // declares the queue, consumes its 20
	require.NoError(t, err)
	left := cfg
	left.n = 5
	require.NoError(t, publish(ctx, left, "0earlier")) // 5 left in the queue
	cfg.keep = false
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	assert.Equal(t, 0, s.duplicates, "-dup 0: nothing was published twice")
	assert.Equal(t, 20, s.delivered)

}

// An interrupted run (its context cancelled while its messages wait in a
// retry queue) keeps the queue and its retry queues without -keep, and
// the summary says so: they were deleted, with the messages they held (a
// review's finding). A run that handled its messages deletes them.
func TestAnInterruptedRunKeepsItsQueue(t *testing.T) {
	url := servicetest.RabbitMQ(t)
	var out bytes.Buffer
	cfg := smallCfg(url, randomQueue("interrupted"), &out)
	cfg.poison, cfg.maxRetry = 1, 1 // every message fails, and waits an hour in the retry queue
	cfg.delays = []time.Duration{time.Hour}
	retry := rabbitmq.RetryTopology{Enabled: true, MaxRetry: cfg.maxRetry, Delays: cfg.delays, HandOffAfter: cfg.handOff, Durable: true}
	t.Cleanup(func() { deleteTopology(url, cfg.queue, retry, false) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	tiers := retry.RetryQueues(cfg.queue)
	require.Len(t, tiers, 1)
	waiting := func() int {
		// A channel each time: a refused passive declare closes it.
		ch, err := conn.Channel()
		if err != nil {
			return -1
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(tiers[0], true, false, false, false, nil)
		if err != nil {
			return -1
		}
		return q.Messages
	}
	runCtx, interrupt := context.WithCancel(ctx)
	type result struct {
		s   summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := run(runCtx, cfg)
		done <- result{s, err}
	}()
	for waiting() < cfg.n {
		select {
		case r := <-done:
			t.Fatalf("the run ended before its messages reached the retry queue: %v", r.err)
		case <-ctx.Done():
			t.Fatalf("the %d messages never all waited in %s", cfg.n, tiers[0])
		case <-time.After(20 * time.Millisecond):
		}
	}
	interrupt()
	r := <-done
	assert.Equal(t, cfg.queue, r.s.kept)
	var report bytes.Buffer
	r.s.print(&report)
	assert.Contains(t, report.String(), "run again with -keep -queue "+cfg.queue)
	assert.Equal(t, cfg.n, waiting(), "the retry queue is kept, with its messages")
	_, err = ch.QueueDeclarePassive(cfg.queue, true, false, false, false, nil)
	assert.NoError(t, err, "the queue is kept")
	ch.Close()

	// A later run without -keep handles its own messages and keeps the
	// queues, since the retry queue still holds the first run's: it
	// deleted them, with those messages (a second review's finding).
	again := cfg
	again.poison = 0
	s, err := run(ctx, again)
	require.NoError(t, err)
	assert.Equal(t, cfg.n, s.delivered)
	assert.Equal(t, cfg.queue, s.kept, "the queues that hold an earlier run's messages are kept")
	assert.Equal(t, cfg.n, waiting(), "the first run's messages still wait in the retry queue")

	// A run that handles its messages deletes its topology.
	done2 := smallCfg(url, randomQueue("finished"), &out)
	s, err = run(ctx, done2)
	require.NoError(t, err)
	assert.Empty(t, s.kept)
	ch2, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch2.QueueDeclarePassive(done2.queue, true, false, false, false, nil)
	assert.Error(t, err, "the finished run's queue is deleted")
}
