package rabbitmq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/resilience"
)

// settlement is what a source tells the broker about one delivery.
type settlement uint8

const (
	ack     settlement = iota + 1 // done with it: remove it from the queue
	requeue                       // not done: put it back for another consumer
	reject                        // failed: dead-letter it (the retry topology)
	recount                       // not done: put a counted copy back, ack it
)

type settle struct {
	tag uint64
	how settlement
	d   *delivery // recount only
}

// A session is one connection and channel of a [Source], from an Open to
// its Close. Delivery tags belong to the channel, so every delivery is
// settled on the session it came from; once that session is gone, its
// deliveries are back in the queue and their settlements are dropped.
//
// Settlements are queued by the pipeline's done callbacks, which must not
// block, and sent by one goroutine, the acker, which owns the channel's ack
// traffic: callbacks on many goroutines never contend for the connection's
// writer, and one stuck socket holds up nobody but the acker.
type session struct {
	// recount puts a copy of d back in the queue with its count of failed
	// deliveries (Source.recount); it runs on the acker, under abort,
	// which close cancels once CloseTimeout has passed.
	recount func(ctx context.Context, d *delivery) error
	abort   context.Context
	cancel  context.CancelFunc

	id     string
	conn   *amqp.Connection
	ch     *amqp.Channel
	closed chan *amqp.Error // the channel's close notification, buffered

	mu       sync.Mutex
	pending  []settle // queued for the acker
	spare    []settle // the acker's last batch, reused
	inflight int      // emitted and not yet settled
	idle     chan struct{}
	quit     bool
	gone     bool          // settlements can no longer be sent
	wake     chan struct{} // the acker has work; buffered 1
	dead     chan struct{} // closed when gone is set
	ackerEnd chan struct{}
}

func newSession(id string, conn *amqp.Connection, ch *amqp.Channel) *session {
	abort, cancel := context.WithCancel(context.Background())
	s := &session{
		id: id, conn: conn, ch: ch, abort: abort, cancel: cancel,
		closed:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		wake:     make(chan struct{}, 1),
		dead:     make(chan struct{}),
		ackerEnd: make(chan struct{}),
	}
	go s.acker()
	return s
}

// track counts one more delivery in flight.
func (s *session) track() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
}

// settle queues a settlement for the acker. It never blocks; on a session
// that is gone it only does the counting.
func (s *session) settle(st settle) {
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	if s.gone {
		s.mu.Unlock()
		return
	}
	s.pending = append(s.pending, st)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// acker sends the queued settlements until the session closes, then sends
// what is left and ends. An error means the channel is gone: the broker has
// requeued every unsettled delivery, and nothing more is sent.
func (s *session) acker() {
	defer close(s.ackerEnd)
	for range s.wake {
		s.mu.Lock()
		batch := s.pending
		s.pending = s.spare[:0]
		quit := s.quit
		if quit {
			s.markGoneLocked()
		}
		s.mu.Unlock()
		for _, st := range batch {
			if err := s.send(st); err != nil {
				s.mu.Lock()
				s.markGoneLocked()
				s.mu.Unlock()
				break
			}
		}
		s.mu.Lock()
		s.spare = batch[:0]
		s.mu.Unlock()
		if quit {
			return
		}
	}
}

func (s *session) send(st settle) error {
	switch st.how {
	case ack:
		return s.ch.Ack(st.tag, false)
	case reject:
		return s.ch.Reject(st.tag, false)
	case recount:
		if s.recount(s.abort, st.d) == nil {
			return s.ch.Ack(st.tag, false)
		}
		return s.ch.Nack(st.tag, false, true)

	default:
		return s.ch.Nack(st.tag, false, true)
	}
}

func (s *session) markGoneLocked() {
	if !s.gone {
		s.gone = true
		s.pending = nil
		close(s.dead)
	}
}

// isGone reports whether the session can no longer settle deliveries.
func (s *session) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone || s.ch.IsClosed()
}

// waitIdle waits until every delivery in flight is settled, the session is
// gone, ctx is done or timeout has passed on clock.
func (s *session) waitIdle(ctx context.Context, clock clockwork.Clock, timeout time.Duration) {
	s.mu.Lock()
	if s.inflight == 0 || s.gone {
		s.mu.Unlock()
		return
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.mu.Unlock()
	t := clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-s.dead:
	case <-ctx.Done():
	case <-t.Chan():
	}
}

// close sends the settlements still queued, then closes the connection,
// which returns every unsettled delivery to the queue. It waits for the
// acker to end; a socket so stuck that the acker cannot finish within
// timeout is unblocked by the close's deadline.
func (s *session) close(clock clockwork.Clock, timeout time.Duration) error {
	s.mu.Lock()
	s.quit = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	t := clock.NewTimer(timeout)
	select {
	case <-s.ackerEnd:
	case <-t.Chan():
		// A copy still being put back (recount) gives up: its message is
		// requeued uncounted when the connection closes.
		s.cancel()
	}
	t.Stop()
	err := closeConn(s.conn, timeout)
	<-s.ackerEnd
	s.cancel()
	return err
}

// lost returns the error that ends a Run whose deliveries channel closed:
// the channel's close reason when the broker or the network closed it, or
// a cancelled consumer (the queue was deleted) when the channel is open.
func (s *session) lost(queue string) error {
	s.mu.Lock()
	s.markGoneLocked()
	s.mu.Unlock()
	select {
	case e, ok := <-s.closed:
		if ok && e != nil {
			return resilience.MarkTransient(fmt.Errorf("rabbitmq: consume queue %q: %w: %w", queue, ErrConnectionLost, e))
		}
	default:
		if !s.ch.IsClosed() {
			return resilience.MarkTransient(fmt.Errorf("rabbitmq: consume queue %q: %w", queue, ErrConsumerCancelled))
		}
	}
	return resilience.MarkTransient(fmt.Errorf("rabbitmq: consume queue %q: %w: %w", queue, ErrConnectionLost, amqp.ErrClosed))
}
