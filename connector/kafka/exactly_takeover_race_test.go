package kafka_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// Close from another goroutine while Run polls and emits, at a moment
// that moves from one attempt to the next: no record's offset is
// committed without its output. A record is settled without output (as
// a filter would) until Close cancelled Run's context, and written
// after; a record whose Write was refused below the committed offset is
// lost. The old code ended the epoch without counting the records a
// poll had just returned (their offsets already in the client's, which
// the commit commits): one of three runs of 60 attempts lost records.
func TestExactlyOnceCloseRacingAPollCommitsNoUnemittedRecord(t *testing.T) {
	const n = 20000
	env := takeoverSetup(t, n)
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: env.c.ListenAddrs(), Topic: env.in, Group: env.in,
		TransactionalID: env.in + "-txn3", Output: env.out, Record: echoRecord, Clock: env.clock,
		CommitInterval: time.Hour, AckTimeout: time.Hour, MaxInFlight: 1, CloseTimeout: 2 * time.Second,
		SessionTimeout: 6 * time.Second})
	require.NoError(t, err)
	src, sink := eo.Source(), eo.Sink()
	lost := 0
	for attempt := 0; attempt < 60 && lost == 0; attempt++ {
		require.NoError(t, src.Open(testContext(t)))
		var seen atomic.Int64
		var mu sync.Mutex
		var refused []int64
		var refusedErr []error
		started := make(chan struct{})
		em := &funcEmitter{f: func(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
			if seen.Add(1) == 20 {
				close(started)
			}
			if ctx.Err() == nil { // Close has not taken over yet
				done(node.Filtered)
				return nil
			}
			if err := sink.Write(context.Background(), m); err != nil {
				mu.Lock()
				refused = append(refused, m.Offset)
				refusedErr = append(refusedErr, err)
				mu.Unlock()
				done(node.Failed)
				return nil
			}
			done(node.Delivered)
			return nil
		}}
		runDone := make(chan error, 1)
		go func() { runDone <- src.Run(testContext(t), em) }()
		<-started
		spin := 0
		for i := 0; i < attempt*37%500; i++ {
			spin += i
		}
		_ = spin
		cerr := src.Close(context.Background())
		rerr := <-runDone
		require.True(t, errors.Is(rerr, kafka.ErrNotOpen) || rerr == nil, "Run: %v", rerr)
		committed := env.a.committed(env.in, env.in)[0]
		mu.Lock()
		for i, off := range refused {
			if off < committed {
				lost++
				t.Logf("attempt %d: record %d emitted after its epoch committed (offset %d committed), Write refused: %v; Close: %v Run: %v",
					attempt, off, committed, refusedErr[i], cerr, rerr)
			}
		}
		mu.Unlock()
	}
	t.Logf("commits %d aborts %d", src.Commits(), src.Aborts())
	require.Zero(t, lost, "records whose offsets were committed without their output")
}

// A funcEmitter runs f for each message.
type funcEmitter struct {
	delivered
	f func(ctx context.Context, m kafka.Message, done func(node.Outcome)) error
}

func (e *funcEmitter) EmitTracked(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
	return e.f(ctx, m, done)
}
