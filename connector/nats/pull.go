package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
// on the wire, held by nobody until AckWait.
func (s *Source) pull(ctx context.Context, sess *session, n int, out node.Emitter[Message]) error {
	// The server sends at most n messages and one status: the channel
	// never fills, and the client never drops one as a slow consumer.
	ch := make(chan *natsgo.Msg, n+4)
	inbox := sess.nc.NewInbox()
	sub, err := sess.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return s.pullFailed(sess, err)
	}
	closed := sub.StatusChanged(natsgo.SubscriptionClosed)
	body, _ := json.Marshal(pullRequest{Batch: n, Expires: s.cfg.PullWait})
	if err := sess.nc.PublishRequest(sess.next, inbox, body); err != nil {
		_ = sub.Unsubscribe()
		return s.pullFailed(sess, err)
	}
	// The server answers an expired request with a 408; this guards
	// against an answer that never comes.
	guard := s.cfg.Clock.NewTimer(s.cfg.PullWait + time.Second)
	defer guard.Stop()

	var (
		got     int
		emitErr error
		end     error // why the request ended early; nil when it completed
	)
	ctxDone, stopDone, expired := ctx.Done(), s.stopCtx.Done(), guard.Chan()
	draining := false
	drain := func() {
		if !draining {
			draining = true
			ctxDone, stopDone, expired = nil, nil, nil
			if sub.Drain() != nil {
				_ = sub.Unsubscribe()
			}
		}
	}
	handle := func(m *natsgo.Msg) (done bool) {
		if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
			return s.status(status, m.Header.Get("Description"), &end)
		}
		got++
		switch {
		case emitErr != nil, ctx.Err() != nil:
			// After a failed emit, or once the run is cancelled, what
			// comes goes back at once; after Stop it is emitted.
			_ = sess.nc.Publish(m.Reply, []byte(ackNak))
		default:
			emitErr = s.emit(ctx, sess, m, out)
		}
		return got == n
	}
loop:
	for {
		select {
		case m := <-ch:
			if handle(m) && !draining {
				break loop
			}
		case <-closed:
			// Drained: take what the subscription put in the channel.
			for {
				select {
				case m := <-ch:
					handle(m)
				default:
					break loop
				}
			}
		case <-ctxDone:
			drain()
		case <-stopDone:
			drain()
		case <-expired:
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
