package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// ErrConsumerGone is matched by the error of a source whose pull request
// the server ended because the consumer went away (deleted, or its
// stream). It is transient: node restart opens the source again, which
// creates the consumer (and the stream, with Declare) again.
var ErrConsumerGone = errors.New("nats: consumer gone")

// errBusy ends a pull request that the server refused for now (the
// consumer has too many waiting requests, or MaxAckPending messages out):
// Run asks again after a while.
var errBusy = errors.New("nats: consumer busy")

// A pullRequest is the body of a JetStream pull request
// ($JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>).
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires,omitempty"`
}

// pull sends one pull request for up to n messages, waiting at most
// PullWait on the server, and emits each message as it comes.
//
// The source pulls by hand, on a subscription of its own, rather than with
// the client's Fetch or Messages: a cancelled run drains that subscription
// (the server stops delivering to it once the unsubscribe reaches it, and
// every message it sent before comes through), so that no message is left
// on the wire, held by nobody until AckWait. The subscription's callback
// holds each message as it arrives (see arrivals), so that the in-progress
// acks cover a message from then on, also while it waits behind others for
// room downstream.
func (s *Source) pull(ctx context.Context, sess *session, n int, out node.Emitter[Message]) error {
	in := &arrivals{s: s, sess: sess, ready: make(chan struct{}, 1)}
	sub, err := sess.nc.Subscribe(sess.nc.NewInbox(), in.receive)
	if err != nil {
		return s.pullFailed(sess, err)
	}
	closed := sub.StatusChanged(natsgo.SubscriptionClosed)
	body, _ := json.Marshal(pullRequest{Batch: n, Expires: s.cfg.PullWait})
	// Naks wait until the server holds the request no more (see
	// session.settle): when this returns, it was fulfilled, it expired, or
	// its unsubscribe was flushed.
	sess.beginPull(ctx, s.cfg.PullWait)
	defer sess.endPull()
	if err := sess.nc.PublishRequest(sess.next, sub.Subject, body); err != nil {
		_ = sub.Unsubscribe()
		return s.pullFailed(sess, err)
	}
	// The server answers an expired request with a 408; this guards
	// against an answer that never comes. The answer queues behind the
	// messages the server sent first: while they still arrive (a slow
	// link), the guard waits on, since giving the request up then would
	// drop what is still on the wire (the subscription's drain waits only
	// so long for it) until AckWait. A link on which nothing arrives is
	// given up by the connection's watchdog (see DeadLinkBound). A pull
	// that is draining (a cancel, a stop) does not wait on: what it gave
	// up goes back to the server for another consumer.
	//
	// The guard's slack past PullWait is the watchdog's time before it
	// probes, not less: the request expires PullWait after it reaches the
	// server, which on a loaded machine can be a second or more after it
	// was published here, and a request given up while the server still
	// holds it takes a redelivery the server sends into it (a nak's, or
	// the last one MaxDeliver allows) to an inbox nobody reads. A request
	// whose answer never comes on a dead link is ended sooner by the
	// watchdog than by this guard.
	guardWait := s.cfg.PullWait + probeAfter
	guard := s.cfg.Clock.NewTimer(guardWait)
	defer guard.Stop()

	var (
		got     int
		emitErr error
		end     error // why the request ended early; nil when it completed
	)
	ctxDone, stopDone, expired := ctx.Done(), s.stopCtx.Done(), guard.Chan()
	draining := false
	arrived := false // since the guard was last set
	drain := func() {
		if !draining {
			draining = true
			sess.giveUpPull()
			ctxDone, stopDone, expired = nil, nil, nil
			if sub.Drain() != nil {
				_ = sub.Unsubscribe()
				// The unsubscribe must reach the server before the naks.
				_ = sess.nc.FlushTimeout(s.cfg.CloseTimeout)
			}
		}
	}
	// handle takes what arrived, and reports whether the request is over.
	handle := func() (done bool) {
		for _, a := range in.take() {
			if a.d == nil {
				done = s.status(a.status, a.descr, &end) || done
				continue
			}
			got++
			switch {
			case emitErr != nil, ctx.Err() != nil:
				// After a failed emit, or once the run is cancelled, what
				// comes goes back at once; after Stop it is emitted.
				a.d.giveBack()
			default:
				emitErr = s.emit(ctx, a.d, out)
			}
			done = done || got == n
		}
		return done
	}
loop:
	for {
		select {
		case <-in.ready:
			arrived = true
			if handle() && !draining {
				break loop
			}
		case <-closed:
			// Drained: every callback has run; take what they left, unless
			// the connection went with the subscription (their acks could
			// not be sent: they go back).
			if !sess.nc.IsClosed() {
				handle()
			}
			break loop
		case <-ctxDone:
			drain()
		case <-stopDone:
			drain()
		case <-expired:
			if arrived && !draining {
				arrived = false
				// A loaded machine may leave a gap of a second or two
				// between messages of a slow link.
				guard.Reset(guardWait)
				continue
			}
			drain()
		case <-sess.closed:
			break loop
		}
		if emitErr != nil || end != nil {
			drain()
		}
	}
	if !draining {
		_ = sub.Unsubscribe()
	}
	// What a callback still held (the connection went away mid-request)
	// goes back.
	for _, a := range in.stop() {
		if a.d != nil {
			a.d.giveBack()
		}
	}
	switch {
	case emitErr != nil:
		return emitErr
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case sess.nc.IsClosed():
		return sess.lost(s.cfg.Stream, s.cfg.Consumer, nil)
	case end != nil:
		return end
	}
	return nil
}

// arrivals are the messages of one pull request that the subscription's
// callback received and the Run loop has not taken yet. The callback holds
// each message at once (session.hold), so that the in-progress acks keep it
// alive while it waits.
type arrivals struct {
	s     *Source
	sess  *session
	ready chan struct{} // buffered 1: something arrived

	mu      sync.Mutex
	queue   []arrival
	stopped bool
}

// An arrival is a message, or a status of the server (d nil).
type arrival struct {
	d             *delivery
	status, descr string
}

// receive is the subscription's callback. It never blocks.
func (in *arrivals) receive(m *natsgo.Msg) {
	a := arrival{}
	if st := m.Header.Get("Status"); st != "" && len(m.Data) == 0 {
		a.status, a.descr = st, m.Header.Get("Description")
	} else if a.d = in.s.delivery(in.sess, m); a.d == nil {
		return // not a JetStream delivery: nothing to ack or emit
	}
	in.mu.Lock()
	if in.stopped {
		in.mu.Unlock()
		if a.d != nil {
			a.d.giveBack()
		}
		return
	}
	in.queue = append(in.queue, a)
	in.mu.Unlock()
	select {
	case in.ready <- struct{}{}:
	default:
	}
}

// take returns what arrived since the last take.
func (in *arrivals) take() []arrival {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.queue
	in.queue = nil
	return q
}

// stop refuses later arrivals (they go back at once) and returns what was
// not taken.
func (in *arrivals) stop() []arrival {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.stopped = true
	q := in.queue
	in.queue = nil
	return q
}

// status reads a status message of the server about the pull request: it
// reports whether the request is over, and sets *end when it ended for a
// reason Run must return.
func (s *Source) status(code, descr string, end *error) bool {
	switch code {
	case "100": // a heartbeat or flow control: not asked for, ignored
		return false
	case "404", "408": // no messages, or the request expired
		return true
	case "409":
		d := strings.ToLower(descr)
		if strings.Contains(d, "deleted") {
			*end = resilience.MarkTransient(fmt.Errorf("nats: consume %s/%s: %w: %s", s.cfg.Stream, s.cfg.Consumer, ErrConsumerGone, descr))
			return true
		}
		if strings.Contains(d, "max") || strings.Contains(d, "exceeded") {
			// Too many waiting requests, or MaxAckPending reached across
			// the consumer's processes: ask again after a while.
			*end = errBusy
			return true
		}
	case "503":
		*end = resilience.MarkTransient(fmt.Errorf("nats: consume %s/%s: no responders (is JetStream on?)", s.cfg.Stream, s.cfg.Consumer))
		return true
	}
	*end = resilience.MarkTransient(fmt.Errorf("nats: consume %s/%s: the server ended the pull request: %s %s", s.cfg.Stream, s.cfg.Consumer, code, descr))
	return true
}

// pullFailed is the error of a pull request that could not be sent.
func (s *Source) pullFailed(sess *session, err error) error {
	if connectionLost(err) || sess.nc.IsClosed() {
		return sess.lost(s.cfg.Stream, s.cfg.Consumer, err)
	}
	return classify(fmt.Errorf("nats: pull from %s/%s: %w", s.cfg.Stream, s.cfg.Consumer, err))
}
