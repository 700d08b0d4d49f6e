package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/servicetest"
)

// smallCfg is a quick run of n = 20 messages that all work.
func smallCfg(url, stream string, out *bytes.Buffer) config {
	return config{url: url, stream: stream, n: 20,
		backoff: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}, handOff: 100 * time.Millisecond,
		maxDeliver: 3, flaky: 0, poison: 0, slow: 0, dup: 0, publishers: 4, reportWriter: out}
}

func randomStream(prefix string) string {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return prefix + hex.EncodeToString(suffix[:])
}

// TestRunAgainWithKeepDeliversEveryMessage runs the sample twice on one
// stream with -keep, as a user who keeps the stream to look at it, then runs
// again. Every run published Nats-Msg-Id msg-0 to msg-<n-1>: the stream's
// duplicate window dropped the second run's messages as duplicates of the
// first's, and the second run waited for n deliveries forever.
func TestRunAgainWithKeepDeliversEveryMessage(t *testing.T) {
	url := servicetest.NATS(t)
	stream := randomStream("sluice-test-keep-")
	var out bytes.Buffer
	cfg := smallCfg(url, stream, &out)
	cfg.keep = true
	defer deleteStream(url, stream, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 20, s.delivered)

	ctx2, cancel2 := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel2()
	s, err = run(ctx2, cfg)
	require.NoError(t, err, "the second run ends; summary: %+v", s)
	assert.Equal(t, 20, s.delivered)
	assert.Zero(t, s.duplicates, "-dup 0: nothing was published twice")
}

// An interrupted run (its context cancelled once its messages, every one
// failing, wait an hour for their next delivery) keeps the stream without -keep, and the
// summary says so: it was deleted, with the messages it held (a review's
// finding). A run that handled its messages deletes it.
func TestAnInterruptedRunKeepsItsStream(t *testing.T) {
	url := servicetest.NATS(t)
	var out bytes.Buffer
	cfg := smallCfg(url, randomStream("sluice-test-interrupted-"), &out)
	cfg.poison = 1 // every message fails, and waits an hour before its next delivery
	cfg.backoff = []time.Duration{time.Hour}
	t.Cleanup(func() { deleteStream(url, cfg.stream, false) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stored := func(stream string) int {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return -1
		}
		info, err := st.Info(ctx)
		if err != nil {
			return -1
		}
		return int(info.State.Msgs)
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
	// Until each message was delivered, failed, and waits its hour
	// unacknowledged.
	waiting := func() int {
		c, err := js.Consumer(ctx, cfg.stream, cfg.stream)
		if err != nil {
			return -1
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending > 0 {
			return -1
		}
		return info.NumAckPending
	}
	for waiting() < cfg.n {
		select {
		case r := <-done:
			t.Fatalf("the run ended before its messages waited: %v", r.err)
		case <-ctx.Done():
			t.Fatalf("the %d messages never all waited unacknowledged in %s", cfg.n, cfg.stream)
		case <-time.After(20 * time.Millisecond):
		}
	}
	interrupt()
	r := <-done
	assert.Equal(t, cfg.stream, r.s.kept)
	var report bytes.Buffer
	r.s.print(&report)
	assert.Contains(t, report.String(), "run again with -keep -stream "+cfg.stream)
	assert.Equal(t, cfg.n, stored(cfg.stream), "the stream is kept, with its messages")

	// A later run without -keep handles its own messages and keeps the
	// stream, whose consumer still has the first run's to deliver: it
	// deleted it, with those messages (a second review's finding).
	again := cfg
	again.poison = 0
	s, err := run(ctx, again)
	require.NoError(t, err)
	assert.Equal(t, cfg.n, s.delivered)
	assert.Equal(t, cfg.stream, s.kept, "a stream whose consumer has messages to deliver is kept")
	assert.Equal(t, 2*cfg.n, stored(cfg.stream), "the first run's messages are still there")

	// A run that handles its messages deletes its stream.
	finished := smallCfg(url, randomStream("sluice-test-finished-"), &out)
	s, err = run(ctx, finished)
	require.NoError(t, err)
	assert.Empty(t, s.kept)
	assert.Equal(t, -1, stored(finished.stream), "the finished run's stream is deleted")
}
