package nats_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// blamePublisher is a publisher of strings to subject through url.
func blamePublisher(t *testing.T, url, subject string, retry bool, ackTimeout time.Duration) *nats.Publisher[string] {
	t.Helper()
	pub, err := nats.NewPublisher(nats.PublisherConfig[string]{
		URL: url, Subject: subject,
		Message:      func(s string) (*natsgo.Msg, error) { return &natsgo.Msg{Data: []byte(s)}, nil },
		AckTimeout:   ackTimeout,
		PubRetry:     nats.PubRetry{Enabled: retry, MaxRetry: 2, Delay: 10 * time.Millisecond},
		DialTimeout:  2 * time.Second,
		CloseTimeout: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

// assertUnknown checks that err says the publish may have been stored,
// for the pipeline (not the message's fault, worth a retry) and for an
// idempotency guard (keep the claim).
func assertUnknown(t *testing.T, err error) {
	t.Helper()
	assert.ErrorIs(t, err, nats.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, idempotency.ErrUnknownOutcome)
	assert.True(t, resilience.IsBlameless(err), "not the message's fault: %v", err)
	assert.True(t, resilience.IsTransient(err), "worth a retry: %v", err)
}

// A PubAck that does not come in time, on a connection that is there, is
// a *PubAckError of unknown outcome, not a lost connection: the publisher
// does not publish it again on its own (the stream stored it), with
// PubRetry or without.
func TestPublishAckTimeoutIsUnknownNotLost(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		a := newAdmin(t)
		name := uniqueName(t)
		subject := a.stream(name)
		px := newProxy(t, a.url)
		pub := blamePublisher(t, px.URL(a.url), subject, retry, 300*time.Millisecond)
		ctx := testContext(t)
		require.NoError(t, pub.Open(ctx))
		px.Pause()
		err := pub.Write(ctx, "m1")
		require.Error(t, err)
		assert.ErrorIs(t, err, nats.ErrAckTimeout, "PubRetry %v", retry)
		assert.NotErrorIs(t, err, nats.ErrConnectionLost, "PubRetry %v", retry)
		assertUnknown(t, err)
		_, retried := resilience.RetriedAttempts(err)
		assert.False(t, retried, "PubRetry %v: published again: %v", retry, err)
		px.Resume()
		assert.Equal(t, uint64(1), a.messages(name), "PubRetry %v", retry)
		assert.Equal(t, 1, px.Connections(), "PubRetry %v", retry)
	}
}

// Close while a Write waits for its PubAck (PubRetry on): the stream has
// the message, and the Write ends with its outcome unknown, not with a
// permanent "publish after Close".
func TestPublishCloseDuringAckWaitIsUnknown(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	px := newProxy(t, a.url)
	pub := blamePublisher(t, px.URL(a.url), subject, true, time.Minute)
	ctx := testContext(t)
	require.NoError(t, pub.Open(ctx))
	px.Pause()
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "m1") }()
	waitFor(t, "the stream to store the message", func() bool { return a.messages(name) == 1 })
	_ = pub.Close(ctx)
	px.Resume()
	err := awaitWrite(t, ctx, done, "the Write still waits after Close")
	require.Error(t, err)
	assertUnknown(t, err)
	assert.ErrorIs(t, err, nats.ErrNotOpen)
	assert.Equal(t, 1, px.Connections(), "no connection dialled after Close")
}

// A server that is away is not the message's fault: the error is
// blameless, with the publisher's retry and without, and says nothing
// was sent.
func TestPublishServerDownIsBlameless(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	for _, retry := range []bool{false, true} {
		px := newProxy(t, a.url)
		pub := blamePublisher(t, px.URL(a.url), "x.y", retry, time.Second)
		px.Close()
		err := pub.Write(ctx, "m1")
		require.Error(t, err)
		assert.True(t, resilience.IsBlameless(err), "PubRetry %v: %v", retry, err)
		assert.NotErrorIs(t, err, nats.ErrOutcomeUnknown, "PubRetry %v: never sent: %v", retry, err)
	}
}

// A stream at its limits (MaxMsgs with DiscardNew) refuses the message for
// its state, not the message's: transient and blameless, not unknown (the
// stream said no). A message larger than the stream takes is the
// message's own fault: permanent.
func TestPublishStreamFullIsBlameless(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	a.cleanup(name)
	ctx := testContext(t)
	_, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
		Storage: jetstream.MemoryStorage, MaxMsgs: 1, MaxMsgSize: 64, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	pub := blamePublisher(t, a.url, name+".in", false, 5*time.Second)
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "m1"))
	err = pub.Write(ctx, "m2")
	require.Error(t, err)
	assert.True(t, resilience.IsTransient(err), "%v", err)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
	assert.NotErrorIs(t, err, nats.ErrOutcomeUnknown)

	err = pub.Write(ctx, string(make([]byte, 100)))
	require.Error(t, err)
	assert.False(t, resilience.IsTransient(err), "%v", err)
	assert.False(t, resilience.IsBlameless(err), "%v", err)
}

// A stream at its byte limit gives the same answer as a message larger
// than the stream's MaxBytes, which no state of the stream ever takes: it
// is transient, for item retry, and not blameless, so that such a message
// runs out of retries and is dead-lettered instead of coming back for
// ever.
func TestPublishStreamBytesLimitIsNotBlameless(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	a.cleanup(name)
	ctx := testContext(t)
	_, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
		Storage: jetstream.MemoryStorage, MaxBytes: 1024, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	pub := blamePublisher(t, a.url, name+".in", false, 5*time.Second)
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "small"))
	err = pub.Write(ctx, string(make([]byte, 4096)))
	require.Error(t, err)
	assert.True(t, resilience.IsTransient(err), "%v", err)
	assert.False(t, resilience.IsBlameless(err), "%v", err)
	assert.NotErrorIs(t, err, nats.ErrOutcomeUnknown)
	assert.Equal(t, uint64(1), a.messages(name))
}

// A Write whose context ends while it waits for the PubAck of what it
// sent ends with the context's cause, its outcome unknown.
func TestPublishCancelledDuringAckWaitIsUnknown(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	px := newProxy(t, a.url)
	pub := blamePublisher(t, px.URL(a.url), subject, true, time.Minute)
	ctx := testContext(t)
	require.NoError(t, pub.Open(ctx))
	px.Pause()
	cause := errors.New("the item's deadline")
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Write(wctx, "m1") }()
	waitFor(t, "the stream to store the message", func() bool { return a.messages(name) == 1 })
	cancel(cause)
	err := awaitWrite(t, ctx, done, "the Write still waits after its context ended")
	px.Resume()
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, nats.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, idempotency.ErrUnknownOutcome)
}

// Close during a Write's retry wait, with nothing sent, ends the Write
// blameless and transient: the Close, not the message, ended it.
func TestPublishCloseDuringRetryWaitIsBlamelessAndTransient(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub, err := nats.NewPublisher(nats.PublisherConfig[string]{
		URL: px.URL(a.url), Subject: "x.y", Clock: clock,
		Message:     func(s string) (*natsgo.Msg, error) { return &natsgo.Msg{Data: []byte(s)}, nil },
		PubRetry:    nats.PubRetry{Enabled: true, MaxRetry: 3, Delay: time.Second},
		DialTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	px.Close() // the server is away: dials are refused
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "b") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the retry's wait
	require.NoError(t, pub.Close(ctx))
	clock.Advance(time.Second)
	err = awaitWrite(t, ctx, done, "the Write still waits")
	require.ErrorIs(t, err, nats.ErrNotOpen)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
	assert.True(t, resilience.IsTransient(err), "%v", err)
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

// A Write whose context ended before it was sent sends nothing, and says
// so: its error is the context's, not of unknown outcome.
func TestPublishCancelledBeforeSentIsNotUnknown(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	ctx := testContext(t)
	pub := blamePublisher(t, a.url, subject, true, time.Second)
	require.NoError(t, pub.Open(ctx))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err := pub.Write(cancelled, "m1")
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, nats.ErrOutcomeUnknown)
	assert.Zero(t, a.messages(name))
}

// blackhole accepts connections and answers nothing, so that a dial to it
// waits for its DialTimeout; accepted gets each connection, which the
// test closes to end that dial.
func blackhole(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	conns := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			conns <- c
		}
	}()
	return ln.Addr().String(), conns
}

// Close does not wait for a Write that dials (up to its DialTimeout), and
// that Write, begun before the Close, ends blameless and transient; the
// connection it was dialling is closed, not kept.
func TestPublishCloseDoesNotWaitForADial(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	addr, accepted := blackhole(t)
	pub, err := nats.NewPublisher(nats.PublisherConfig[string]{
		URL: "nats://" + addr, Subject: "x.y",
		Message:     func(s string) (*natsgo.Msg, error) { return &natsgo.Msg{Data: []byte(s)}, nil },
		DialTimeout: time.Minute,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "m1") }()
	var conn net.Conn
	select {
	case conn = <-accepted:
	case <-ctx.Done():
		t.Fatal("the Write did not dial")
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
	err = awaitWrite(t, ctx, done, "the Write still waits")
	require.Error(t, err)
	assert.True(t, resilience.IsBlameless(err), "%v", err)
	assert.True(t, resilience.IsTransient(err), "%v", err)
}
