package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// capEmitter records the done callbacks of tracked items.
type capEmitter struct {
	mu    sync.Mutex
	dones []func(node.Outcome)
	got   chan struct{}
}

func (e *capEmitter) Emit(context.Context, rabbitmq.Message) error           { return nil }
func (e *capEmitter) EmitAt(context.Context, rabbitmq.Message, []byte) error { return nil }

func (e *capEmitter) EmitTracked(_ context.Context, _ rabbitmq.Message, done func(node.Outcome)) error {
	e.mu.Lock()
	e.dones = append(e.dones, done)
	e.mu.Unlock()
	e.got <- struct{}{}
	return nil
}

// With MaxDeliveries, an item left Failed is put back as a counted copy by
// the acker. When the broker goes silent, Close does not wait for the
// copy's confirm (30 s): it gives up after CloseTimeout, and the message
// goes back to the queue once, uncounted, never beside a copy.
func TestRecountGivesUpAtClose(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	px := newProxy(t, a.url)
	cfg := rabbitmq.SourceConfig{URL: px.url(a.url), Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		MaxDeliveries: 3, CloseTimeout: 300 * time.Millisecond}
	src, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	ctx := testContext(t)
	require.NoError(t, src.Open(ctx))
	a.publish(q, "m")
	em := &capEmitter{got: make(chan struct{}, 1)}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(runCtx, em) }()
	<-em.got
	stopRun()
	<-runDone

	px.pause() // the broker goes silent: a partition, a stuck node
	em.dones[0](node.Failed)
	closed := make(chan struct{})
	go func() {
		_ = src.Close(context.Background())
		close(closed)
	}()
	// Well before the copy's confirm timeout of 30 s; only a guard.
	guard, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	select {
	case <-closed:
	case <-guard.Done():
		px.resume()
		<-closed
		t.Fatal("Close waited for the copy's confirm, not CloseTimeout")
	}
	px.resume()

	ch := a.channel()
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	require.NoError(t, err)
	select {
	case d := <-ds:
		assert.Equal(t, "m", d.MessageId)
		assert.Nil(t, d.Headers[rabbitmq.HeaderDeliveries], "the original, requeued, not a copy")
		require.NoError(t, d.Ack(false))
	case <-ctx.Done():
		t.Fatal("the message did not come back")
	}
	require.NoError(t, ch.Cancel("", false))
	ready, _ := a.depth(q)
	assert.Zero(t, ready, "one message published, one delivered: no copy beside it")
}
