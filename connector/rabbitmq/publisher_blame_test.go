package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// assertUnknown checks that err says the publish may have reached the
// broker, for the pipeline (not the message's fault, worth a retry) and
// for an idempotency guard (keep the claim).
func assertUnknown(t *testing.T, err error) {
	t.Helper()
	assert.ErrorIs(t, err, rabbitmq.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, idempotency.ErrUnknownOutcome)
	assert.True(t, resilience.IsBlameless(err), "not the message's fault: %v", err)
	assert.True(t, resilience.IsTransient(err), "worth a retry: %v", err)
}

// A Write after Close is refused, permanently, without dialling: a
// connection dialled then would be closed by nothing. Open starts
// publishing again.
func TestPublishAfterCloseRefused(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Confirms: waitConfirms,
		PubRetry: rabbitmq.PubRetry{Enabled: true}})
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Close(ctx))

	err := pub.Write(ctx, "after-close")
	require.ErrorIs(t, err, rabbitmq.ErrNotOpen)
	assert.False(t, resilience.IsTransient(err))
	assert.Equal(t, 1, px.connections(), "no connection dialled after Close")
	ready, _ := a.depth(q)
	assert.Zero(t, ready)

	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "after-open"))
	ready, _ = a.depth(q)
	assert.Equal(t, 1, ready)
}

// Close while a Write waits for its confirm, under PubRetry: the Write
// does not dial again to publish a second copy; it ends with its outcome
// unknown (the broker may have taken the message before the close).
func TestPublishCloseDuringConfirmWait(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Clock: clock,
		Confirms: waitConfirms, CloseTimeout: 100 * time.Millisecond,
		PubRetry: rabbitmq.PubRetry{Enabled: true, MaxRetry: 3, Delay: time.Second}})
	require.NoError(t, pub.Open(ctx))
	px.pause()
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "m1") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // sent; its confirm's wait
	_ = pub.Close(ctx)                                  // the close-ok is held back: CloseTimeout
	px.resume()
	err := awaitWrite(t, ctx, done, "the Write still waits after Close")
	require.Error(t, err)
	assertUnknown(t, err)
	assert.ErrorIs(t, err, rabbitmq.ErrNotOpen)
	assert.Equal(t, 1, px.connections(), "no connection dialled after Close")
}

// A message the broker refuses by closing the channel (an invalid
// expiration: 406) ends every publish waiting on that channel with its
// reason; the others are not the refused one: their error is transient,
// and a retry of theirs goes through, while the refused one is refused
// again.
func TestPublishNeighbourRefusalLeavesOthersRetryable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Clock: clock,
		Confirms: waitConfirms,
		Publishing: func(s string) (amqp.Publishing, error) {
			m := amqp.Publishing{Body: []byte(s)}
			if s == "bad" {
				m.Expiration = "not-a-number"
			}
			return m, nil
		}})
	require.NoError(t, pub.Open(ctx))
	px.pause()
	bad, good := make(chan error, 1), make(chan error, 1)
	go func() { bad <- pub.Write(ctx, "bad") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	go func() { good <- pub.Write(ctx, "good") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	px.resume()
	for _, c := range []chan error{bad, good} {
		select {
		case err := <-c:
			require.Error(t, err)
			assertAMQPCode(t, err, amqp.PreconditionFailed)
			assert.True(t, resilience.IsTransient(err), "%v", err)
			assert.False(t, resilience.IsBlameless(err), "the broker refused one of them: %v", err)
			assert.ErrorIs(t, err, rabbitmq.ErrOutcomeUnknown)
		case <-ctx.Done():
			t.Fatal("a Write still waits after the channel closed")
		}
	}
	require.NoError(t, pub.Write(ctx, "good"), "the neighbour's retry")
	err := pub.Write(ctx, "bad")
	assertAMQPCode(t, err, amqp.PreconditionFailed)
	ready, _ := a.depth(q)
	assert.Equal(t, 1, ready)
}

// A broker that is away is not the message's fault: the error is
// blameless, with the publisher's retry and without.
func TestPublishBrokerDownIsBlameless(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	a := newAdmin(t)
	for _, retry := range []bool{false, true} {
		px := newProxy(t, a.url)
		pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: "q", Confirms: waitConfirms,
			DialTimeout: time.Second, PubRetry: rabbitmq.PubRetry{Enabled: retry, MaxRetry: 2, Delay: time.Millisecond}})
		px.Close()
		err := pub.Write(ctx, "m1")
		require.Error(t, err)
		assert.True(t, resilience.IsBlameless(err), "PubRetry %v: %v", retry, err)
		assert.NotErrorIs(t, err, rabbitmq.ErrOutcomeUnknown, "never sent: %v", err)
	}
}

// A nack is transient, for item retry, but not blameless: the broker does
// not say why, and a message larger than a queue's x-max-length-bytes is
// nacked every time, by an empty queue too, so it must run out of
// retries and be dead-lettered rather than come back for ever. It says
// the broker did not take the message: not unknown.
func TestPublishNackIsTransientNotBlameless(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	for _, args := range []amqp.Table{
		{"x-max-length": int32(1), "x-overflow": "reject-publish"},
		{"x-max-length-bytes": int64(1024), "x-overflow": "reject-publish"},
	} {
		q := uniqueName(t)
		a.declareQueue(q, args)
		pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, RoutingKey: q, Confirms: waitConfirms,
			Publishing: func(s string) (amqp.Publishing, error) { return amqp.Publishing{Body: []byte(s)}, nil }})
		require.NoError(t, pub.Open(ctx))
		require.NoError(t, pub.Write(ctx, "m1"))
		err := pub.Write(ctx, strings.Repeat("x", 4096))
		require.ErrorIs(t, err, rabbitmq.ErrNacked, "%v", args)
		assert.True(t, resilience.IsTransient(err), "%v", args)
		assert.False(t, resilience.IsBlameless(err), "%v", args)
		assert.NotErrorIs(t, err, rabbitmq.ErrOutcomeUnknown, "%v: the broker said no", args)
	}
}

// A Write whose context ends while it waits for the confirm of what it
// sent ends with the context's cause, its outcome unknown.
func TestPublishCancelledDuringConfirmWaitIsUnknown(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Clock: clock,
		Confirms: rabbitmq.Confirms{Enabled: true, WaitFor: true, Timeout: time.Minute}, CloseTimeout: 100 * time.Millisecond,
		PubRetry: rabbitmq.PubRetry{Enabled: true, MaxRetry: 3, Delay: time.Second}})
	require.NoError(t, pub.Open(ctx))
	px.pause()
	cause := errors.New("the item's deadline")
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Write(wctx, "m1") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // sent; its confirm's wait
	cancel(cause)
	err := awaitWrite(t, ctx, done, "the Write still waits after its context ended")
	px.resume()
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, rabbitmq.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, idempotency.ErrUnknownOutcome)
}

// A publish stuck writing to a broker that does not read (TCP
// backpressure, as under a resource alarm) ends when its context ends,
// and Close ends a stuck one too, within CloseTimeout, instead of waiting
// for the publisher's lock that the stuck write holds.
func TestPublishStuckWriteEndsWithItsContextAndClose(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	// The body alone: textPublishing's MessageId would be the body, which
	// the library refuses before it writes a byte (a shortstr is at most
	// 255 bytes), and no write would back up. 12 MiB, more than the
	// sockets' buffers take (4 MiB sent, 32 MiB received here), and less
	// than RabbitMQ's largest message (16 MiB).
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Confirms: waitConfirms,
		CloseTimeout: 500 * time.Millisecond,
		Publishing:   func(s string) (amqp.Publishing, error) { return amqp.Publishing{Body: []byte(s)}, nil }})
	require.NoError(t, pub.Open(ctx))
	px.Bandwidth(1) // 1 kB/s: the client's writes back up
	body := string(make([]byte, 12<<20))
	within := func(what string, c <-chan error) error {
		t.Helper()
		select {
		case err := <-c:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still blocked", what)
			return nil
		}
	}

	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	wrote := make(chan error, 1)
	go func() { wrote <- pub.Write(wctx, body) }()
	err := within("a Write whose context ended", wrote)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	go func() { wrote <- pub.Write(ctx, body) }()
	// The first Write's end closed its connection: this one dials again,
	// and then its write backs up (or Close comes during the dial).
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for px.connections() < 2 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the second Write did not dial")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(ctx) }()
	_ = within("Close, with a Write stuck", closed)
	err = within("a Write stuck when Close came", wrote)
	require.Error(t, err)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
}

// A Write whose context ended before it was sent is not sent, and leaves
// the connection its neighbours share open.
func TestPublishCancelledWriteKeepsTheConnection(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Confirms: waitConfirms})
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "a"))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, pub.Write(cancelled, "x"), context.Canceled)
	require.NoError(t, pub.Write(ctx, "b"))
	assert.Equal(t, 1, px.connections(), "the healthy connection was closed")
	ready, _ := a.depth(q)
	assert.Equal(t, 2, ready)
}

// A retry the broker nacks, after an earlier attempt that reached it but
// whose confirm never came (the connection was cut), keeps the outcome
// unknown: the broker has the message.
func TestPublishRetryNackedAfterASentAttemptIsUnknown(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q,
		Confirms: waitConfirms, PubRetry: rabbitmq.PubRetry{Enabled: true, Delay: 10 * time.Millisecond}})
	require.NoError(t, pub.Open(ctx))
	px.pause()
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "b") }()
	require.Eventually(t, func() bool { n, _ := a.depth(q); return n == 1 }, 20*time.Second, 10*time.Millisecond)
	px.cut()
	px.resume()
	err := awaitWrite(t, ctx, done, "the Write still waits")
	require.ErrorIs(t, err, rabbitmq.ErrNacked)
	assert.ErrorIs(t, err, rabbitmq.ErrOutcomeUnknown, "the broker has the message")
	ready, _ := a.depth(q)
	assert.Equal(t, 1, ready)
}

// Close during a Write's retry wait, with nothing sent, ends the Write
// blameless and transient: the Close, not the message, ended it.
func TestPublishCloseDuringRetryWaitIsBlamelessAndTransient(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: uniqueName(t), Clock: clock,
		Confirms: waitConfirms, PubRetry: rabbitmq.PubRetry{Enabled: true, Delay: time.Second}})
	px.Close() // the broker is away: dials are refused
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "b") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the retry's wait
	require.NoError(t, pub.Close(ctx))
	clock.Advance(time.Second)
	err := awaitWrite(t, ctx, done, "the Write still waits")
	require.ErrorIs(t, err, rabbitmq.ErrNotOpen)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
	assert.True(t, resilience.IsTransient(err), "%v", err)
	assert.NotErrorIs(t, err, rabbitmq.ErrOutcomeUnknown, "nothing was sent")
}

// Close does not wait for a Write that is dialling (its DialTimeout): the
// connection the Write dials is closed by the Write, which sees the Close.
func TestPublishCloseDoesNotWaitForADial(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q,
		Confirms: waitConfirms, DialTimeout: time.Minute, CloseTimeout: 200 * time.Millisecond})
	px.pause() // the handshake's answers are held back
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "b") }()
	require.Eventually(t, func() bool { return px.connections() == 1 }, 20*time.Second, 5*time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(ctx) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for the dial")
	}
	px.resume()
	err := awaitWrite(t, ctx, done, "the Write still waits")
	require.ErrorIs(t, err, rabbitmq.ErrNotOpen)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
	ready, _ := a.depth(q)
	assert.Zero(t, ready)
}

// awaitWrite returns the error a Write sent on done, and fails the test
// with what (what still waits) when ctx ends first.
func awaitWrite(t *testing.T, ctx context.Context, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatal(what)
		return nil
	}
}

// A Write begun before Close, which waits for the publisher while another
// Write dials, is not refused as a Write after Close: both end blameless
// and transient, and Close waits for neither.
func TestPublishWriteQueuedAtCloseIsBlameless(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			accepted <- c
		}
	}()
	second := make(chan struct{})
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: "amqp://guest:guest@" + ln.Addr().String() + "/", RoutingKey: "q",
		Confirms: waitConfirms, DialTimeout: time.Minute,
		Publishing: func(s string) (amqp.Publishing, error) {
			if s == "second" {
				close(second)
			}
			return amqp.Publishing{Body: []byte(s)}, nil
		}})
	first, queued := make(chan error, 1), make(chan error, 1)
	go func() { first <- pub.Write(ctx, "first") }()
	var conn net.Conn
	select {
	case conn = <-accepted: // the first Write dials, and waits for an answer
	case <-ctx.Done():
		t.Fatal("the first Write did not dial")
	}
	go func() { queued <- pub.Write(ctx, "second") }()
	select {
	case <-second: // the second Write began
	case <-ctx.Done():
		t.Fatal("the second Write did not begin")
	}
	closed := make(chan error, 1)
	go func() { closed <- pub.Close(ctx) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for the dial")
	}
	conn.Close() // the dial fails now
	for _, c := range []chan error{first, queued} {
		err := awaitWrite(t, ctx, c, "a Write still waits")
		require.ErrorIs(t, err, rabbitmq.ErrNotOpen)
		assert.True(t, resilience.IsBlameless(err), "%v", err)
		assert.True(t, resilience.IsTransient(err), "%v", err)
	}
}

// A retry that the broker confirms, after an earlier attempt that reached
// it but whose confirm never came (the connection was cut), returns nil:
// the message is on the queue twice, and Resent counts the Write so. A
// Write confirmed at its first attempt is not counted.
func TestPublisherResentCountsALostConfirm(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q,
		Confirms: waitConfirms, PubRetry: rabbitmq.PubRetry{Enabled: true, Delay: 10 * time.Millisecond}})
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "a"))
	assert.Zero(t, pub.Resent(), "confirmed at once")
	px.pause()
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "b") }()
	require.Eventually(t, func() bool { n, _ := a.depth(q); return n == 2 }, 20*time.Second, 10*time.Millisecond)
	px.cut()
	px.resume()
	require.NoError(t, awaitWrite(t, ctx, done, "the Write still waits"))
	ready, _ := a.depth(q)
	assert.Equal(t, 3, ready, "b twice")
	assert.Equal(t, int64(1), pub.Resent())
}
