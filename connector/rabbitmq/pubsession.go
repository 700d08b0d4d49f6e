package rabbitmq

import (
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/resilience"
)

// SeqHeader is the header a publisher adds to each mandatory message: the
// message's publish sequence number on its channel, by which a message the
// broker returns is matched to its publish. Consumers see it; it means
// nothing outside the publishing channel.
const SeqHeader = "x-sluice-publish-seq"

// A publish is one message sent on a session, waiting for its confirm.
type publish struct {
	sess       *pubSession
	seq        uint64
	exchange   string
	routingKey string
	sent       time.Time
	done       chan struct{} // closed when err is final
	err        error         // nil: confirmed
	returned   *ReturnError
}

// A pubSession is one connection and channel of a publisher. Its
// dispatcher goroutine takes the broker's returns and confirms, both from
// unbuffered channels, in the order the broker sent them: a return arrives
// before the confirm of the same message, so when the confirm comes the
// return is already recorded, and the publish fails as returned.
type pubSession struct {
	conn *amqp.Connection
	ch   *amqp.Channel

	mu      sync.Mutex
	pending map[uint64]*publish
	err     error // why the channel closed, once it did
	end     chan struct{}
}

func newPubSession(conn *amqp.Connection, ch *amqp.Channel, confirming bool) *pubSession {
	s := &pubSession{conn: conn, ch: ch, pending: make(map[uint64]*publish), end: make(chan struct{})}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	var confirms chan amqp.Confirmation
	var returns chan amqp.Return
	if confirming {
		confirms = ch.NotifyPublish(make(chan amqp.Confirmation))
		returns = ch.NotifyReturn(make(chan amqp.Return))
	}
	go s.dispatch(closed, confirms, returns)
	return s
}

// dispatch runs until the library closes every notification channel, which
// it does when the channel closes.
func (s *pubSession) dispatch(closed chan *amqp.Error, confirms chan amqp.Confirmation, returns chan amqp.Return) {
	defer close(s.end)
	var reason error = amqp.ErrClosed
	for closed != nil || confirms != nil || returns != nil {
		select {
		case e, ok := <-closed:
			if !ok {
				closed = nil
				continue
			}
			if e != nil {
				reason = e
			}
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.onReturn(r)
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			s.onConfirm(c)
		}
	}
	s.fail(reason)
}

func (s *pubSession) onReturn(r amqp.Return) {
	seq, ok := r.Headers[SeqHeader].(int64)
	if !ok {
		return
	}
	s.mu.Lock()
	if p := s.pending[uint64(seq)]; p != nil {
		p.returned = &ReturnError{Exchange: r.Exchange, RoutingKey: r.RoutingKey, ReplyCode: r.ReplyCode, ReplyText: r.ReplyText}
	}
	s.mu.Unlock()
}

func (s *pubSession) onConfirm(c amqp.Confirmation) {
	s.mu.Lock()
	p := s.pending[c.DeliveryTag]
	delete(s.pending, c.DeliveryTag)
	s.mu.Unlock()
	if p == nil {
		return // it timed out, or its Write gave up
	}
	switch {
	case !c.Ack:
		// Transient, not blameless: the broker does not say why, and a
		// message larger than a queue's x-max-length-bytes is nacked
		// every time, the message's own fault.
		p.err = resilience.MarkTransient(&ConfirmError{Exchange: p.exchange, RoutingKey: p.routingKey})
	case p.returned != nil:
		p.err = resilience.MarkPermanent(p.returned)
	}
	close(p.done)
}

// fail ends every publish still waiting with the channel's close reason.
//   - A connection that went away: the outcome is unknown (the broker may
//     have taken the message before), and not the message's fault; it is
//     retried under PubRetry.
//   - The broker refused the publisher's target (no such exchange):
//     every publish waiting is refused alike, permanent.
//   - Any other refusal (406, an invalid property of one message; 403, a
//     routing key the user may not publish to) may be one message's, but
//     every publish waiting on the channel ends with it:
//     transient, the outcome unknown, so that item retry tells them apart
//     (the others go through on a new channel; the refused one is refused
//     again until its retries run out).
func (s *pubSession) fail(reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lost := connectionLost(reason)
	if lost {
		s.err = fmt.Errorf("%w: %w", ErrConnectionLost, reason)
	} else {
		s.err = reason
	}
	var ae *amqp.Error
	target := !lost && errors.As(reason, &ae) && ae.Code == amqp.NotFound
	for seq, p := range s.pending {
		err := fmt.Errorf("rabbitmq: publish to exchange %q with key %q: channel closed before the confirm: %w", p.exchange, p.routingKey, s.err)
		switch {
		case lost:
			p.err = outcomeUnknown(err)
		case target:
			p.err = resilience.MarkPermanent(err)
		default:
			p.err = resilience.MarkTransient(outcomeUnknown(err))
		}
		close(p.done)
		delete(s.pending, seq)
	}
}

// register adds p to the publishes waiting for a confirm, unless the
// channel already closed.
func (s *pubSession) register(p *publish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.pending[p.seq] = p
	return nil
}

// forget removes p from the publishes waiting for a confirm, and reports
// whether it was still waiting; when it was not, p.done is closed or about
// to be.
func (s *pubSession) forget(p *publish) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[p.seq] != p {
		return false
	}
	delete(s.pending, p.seq)
	return true
}

// broken reports whether the session can no longer publish.
func (s *pubSession) broken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil || s.ch.IsClosed()
}

// close closes the connection and waits for the dispatcher, which ends
// once the library has closed the notification channels.
func (s *pubSession) close(timeout time.Duration) error {
	err := closeConn(s.conn, timeout)
	<-s.end
	return err
}
