package nats

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	natsgo "github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/resilience"
)

// settlement is what a source tells the server about one delivery.
type settlement uint8

const (
	ack      settlement = iota + 1 // done with it: never deliver it again
	nak                            // not done: deliver it again now
	nakDelay                       // not done: deliver it again after a delay
	term                           // dead-lettered: never deliver it again
	recount                        // failed a run: publish a counted copy, then ack it (see Source.recount)
)

type settle struct {
	d     *delivery
	how   settlement
	delay time.Duration // nakDelay only
}

// A session is one connection of a [Source], from an Open to its Close,
// and the messages it holds: fetched and not yet settled. Acks travel on
// the connection that received the message only in the sense that the
// server takes them on any; but once the session's connection is gone its
// settlements cannot be sent, and the server delivers its messages again
// after AckWait.
//
// Settlements are queued by the pipeline's done callbacks, which must not
// block, and sent by one goroutine, the acker: one stuck socket holds up
// nobody but the acker. Every ProgressInterval on the source's clock,
// another goroutine, the progress ticker, asks the acker to send an
// in-progress ack for every message held, so that the server does not
// deliver a message to another consumer while the pipeline still works on
// it (an item retried in process, an item waiting for room downstream).
// The acker is the only writer of acks: an in-progress ack that followed
// its message's nak on the wire would restart the ack wait, and cut a
// nak's delay to AckWait.
type session struct {
	id     string
	nc     *natsgo.Conn
	closed <-chan struct{} // closed with the connection
	next   string          // the subject of pull requests

	mu   sync.Mutex
	held map[*delivery]struct{}
	// unsent counts the settlements queued (pending or deferred) that the
	// acker has not yet written to the connection: their messages still
	// count against the server's ack pending, so room counts them as held
	// (see room).
	unsent  int
	freed   chan struct{}   // a message was settled or its settlement sent; buffered 1
	gate    <-chan struct{} // tests only: the acker sends a batch once it is closed
	pending []settle
	spare   []settle
	wpi     bool          // the progress ticker asks for in-progress acks
	replies []string      // the acker's: where to send them
	idle    chan struct{} // closed when held empties, made by waitIdle
	quit    bool
	gone    bool // settlements can no longer be sent
	dead    chan struct{}
	wake    chan struct{} // the acker has work; buffered 1
	// pulling is set while a pull request of the source may still be
	// waiting at the server, for the run whose context is pullCtx; ending
	// once the source gives the request up. The naks settled then wait in
	// deferred (see settle).
	pulling, ending bool
	pullCtx         context.Context
	deferred        []settle
	// expires is when the server drops the pull request last sent, on
	// wall; stale, once that request was given up: until then, a nak
	// waits with a delay and a copy is not published (see acker). The
	// server expires a request on its own clock, in real time, whatever
	// the source's clock: wall is the real clock.
	expires, stale time.Time
	clock, wall    clockwork.Clock
	// nakDelay is the delay to send in a nak for d to wait w
	// (SourceConfig.nakDelay).
	nakDelay func(d *delivery, w time.Duration) time.Duration
	// recount publishes the counted copy of a delivery that failed a run,
	// or dead-letters it (Source.recount), and returns how to settle it;
	// it runs on the acker, under abort, which close cancels once
	// CloseTimeout has passed.
	recount func(ctx context.Context, d *delivery) settlement
	abort   context.Context
	cancel  context.CancelFunc

	ackerEnd    chan struct{}
	progressEnd chan struct{}
	stopTicker  chan struct{}
}

func newSession(id string, nc *natsgo.Conn, closed <-chan struct{}, next string, clock clockwork.Clock, interval time.Duration) *session {
	abort, cancel := context.WithCancel(context.Background())
	s := &session{
		id: id, nc: nc, closed: closed, next: next, clock: clock, wall: clockwork.NewRealClock(),
		abort: abort, cancel: cancel,
		held:        map[*delivery]struct{}{},
		freed:       make(chan struct{}, 1),
		dead:        make(chan struct{}),
		wake:        make(chan struct{}, 1),
		ackerEnd:    make(chan struct{}),
		progressEnd: make(chan struct{}),
		stopTicker:  make(chan struct{}),
	}
	go s.acker()
	go s.progress(clock, interval)
	return s
}

// hold counts d as held.
func (s *session) hold(d *delivery) {
	s.mu.Lock()
	s.held[d] = struct{}{}
	s.mu.Unlock()
}

// room returns how many more messages the session may hold under limit: a
// message counts until its settlement is written to the connection. The
// pull request that follows is written after those settlements, on the same
// connection, so the server has them before it delivers more: at most limit
// messages of this session are ever held or unsettled at the server, which
// bounds what comes back to another consumer when this process dies or its
// link is cut. (A message nak'd with a delay, a broker retry, is settled
// here but stays in the consumer's ack pending at the server until its
// delay ends: MaxAckPending must leave room for those.) (Counting a message free once its settlement was only queued let a
// lagging acker fall behind by several batches: 53 messages unacked at a
// cut with Batch 20, 139 delivered twice after a SIGKILL with Batch 50.)
func (s *session) room(limit int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return limit - len(s.held) - s.unsent
}

// counts returns how many messages are held, and how many settlements wait
// for the acker.
func (s *session) counts() (held, unsent int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held), s.unsent
}

// settle queues a settlement for the acker. It never blocks; on a session
// that is gone it only does the counting.
//
// A nak (or a recount, which may end as one) waits while a pull request
// that the source gives up (its run ending) may still be waiting at the
// server: the server sends a message nak'd for immediate redelivery to
// the first request that waits, and when that is this one, the redelivery
// goes to a subscription that is gone: it is counted and held by nobody
// until AckWait, or, once the server noticed the request gone, its
// delivery count is set back (seen on server 2.9.10). endPull sends the
// deferred naks once the server knows the request is over.
func (s *session) settle(st settle) {
	st.d.endCrash(st.how)
	s.mu.Lock()
	delete(s.held, st.d)
	if len(s.held) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	switch {
	case s.gone:
	case s.pulling && (s.ending || s.pullCtx.Err() != nil) && (st.how == nak || st.how == recount):
		s.deferred = append(s.deferred, st)
		s.unsent++
	default:
		s.pending = append(s.pending, st)
		s.unsent++
	}
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// beginPull says that a pull request of the run whose context is ctx is
// about to be sent: once ctx is done or giveUpPull is called, naks wait
// until endPull.
func (s *session) beginPull(ctx context.Context, wait time.Duration) {
	s.mu.Lock()
	s.pulling, s.ending, s.pullCtx = true, false, ctx
	s.expires = s.wall.Now().Add(wait)
	s.mu.Unlock()
}

// giveUpPull says that the source gives the pull request up (Stop, or the
// request's guard expired).
func (s *session) giveUpPull() {
	s.mu.Lock()
	s.ending = true
	s.mu.Unlock()
}

// endPull says that the server holds no pull request of the source any
// more (it was fulfilled, expired, or its subscription's unsubscribe was
// flushed), and queues the naks that waited.
func (s *session) endPull() {
	s.mu.Lock()
	if s.ending || (s.pullCtx != nil && s.pullCtx.Err() != nil) {
		// Given up: the server may still try to deliver into it until it
		// expires.
		s.stale = s.expires.Add(staleMargin)
	}
	s.pulling, s.ending, s.pullCtx = false, false, nil
	if !s.gone {
		s.pending = append(s.pending, s.deferred...)
	}
	s.deferred = nil
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// acker sends the queued settlements until the session closes, then sends
// what is left and ends. An error means the connection is gone: nothing
// more can be sent.
func (s *session) acker() {
	defer close(s.ackerEnd)
	for range s.wake {
		s.mu.Lock()
		batch := s.pending
		s.pending = s.spare[:0]
		quit := s.quit
		// The messages held now have no settlement in batch or before it,
		// and theirs come after these in-progress acks.
		replies := s.replies[:0]
		if s.wpi && !quit {
			for d := range s.held {
				replies = append(replies, d.msg.Reply)
			}
		}
		s.wpi = false
		gate := s.gate
		s.mu.Unlock()
		if gate != nil && len(batch) > 0 {
			select {
			case <-gate:
			case <-s.closed:
			case <-s.abort.Done():
			}
		}
		for _, st := range batch {
			if wait := s.untilStale(); wait > 0 {
				// A pull request given up still waits at the server: a
				// message nak'd or published now could be sent into it.
				switch st.how {
				case nak:
					st.how, st.delay = nakDelay, s.nakDelay(st.d, wait)
				case recount:
					// Bounded by PullWait, in real time; a connection gone
					// cannot send it, and a Close past CloseTimeout ends it
					// (the copy then fails, and the count stays in
					// process: see Source.recount).
					t := s.wall.NewTimer(wait)
					select {
					case <-t.Chan():
					case <-s.closed:
					case <-s.abort.Done():
					}
					t.Stop()
				}
			}
			if st.how == recount {
				// The copy first, then the ack; or the dead letter, then
				// the term; a copy that failed naks.
				st.how = nak
				if s.recount != nil {
					st.how = s.recount(s.abort, st.d)
				}
			}
			if err := s.nc.Publish(st.d.msg.Reply, st.body()); err != nil && connectionLost(err) {
				s.markGone()
				break
			}
		}
		for _, r := range replies {
			// An error is a lost connection, which Run reports.
			if err := s.nc.Publish(r, []byte(ackProgress)); err != nil && connectionLost(err) {
				break
			}
		}
		s.replies = replies[:0]
		s.mu.Lock()
		s.spare = batch[:0]
		if !s.gone {
			s.unsent -= len(batch)
		}
		s.mu.Unlock()
		if len(batch) > 0 {
			select {
			case s.freed <- struct{}{}:
			default:
			}
		}
		if quit {
			s.markGone()
			return
		}
	}
}

// staleMargin is added to a given-up pull request's expiry, for the
// server's clock and the request's trip.
const staleMargin = 250 * time.Millisecond

// untilStale returns how long a pull request given up may still wait at
// the server; 0 for none.
func (s *session) untilStale() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale.IsZero() {
		return 0
	}
	return max(s.stale.Sub(s.wall.Now()), 0)
}

// The bodies of the acks a consumer sends to a message's reply subject.
const (
	ackAck      = "+ACK"
	ackNak      = "-NAK"
	ackTerm     = "+TERM"
	ackProgress = "+WPI"
)

// body is what st sends to its message's reply subject. The source
// writes the acks itself, on its own connection, rather than through the
// client's message methods: they then need nothing of the subscription
// that received the message, which a cancelled pull has already closed.
func (st settle) body() []byte {
	switch st.how {
	case ack:
		return []byte(ackAck)
	case term:
		return []byte(ackTerm)
	case nakDelay:
		return fmt.Appendf(nil, "%s {\"delay\": %d}", ackNak, st.delay.Nanoseconds())
	default:
		return []byte(ackNak)
	}
}

// progress asks the acker for an in-progress ack of every message held,
// every interval, until the session closes.
func (s *session) progress(clock clockwork.Clock, interval time.Duration) {
	defer close(s.progressEnd)
	t := clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopTicker:
			return
		case <-s.closed:
			return
		case <-t.Chan():
		}
		s.mu.Lock()
		s.wpi = len(s.held) > 0
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (s *session) markGone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.gone {
		s.gone = true
		s.pending, s.deferred, s.unsent = nil, nil, 0
		close(s.dead)
	}
}

// isGone reports whether the session can no longer settle messages.
func (s *session) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone || s.nc.IsClosed()
}

// waitIdle waits until every message held is settled, the session is gone,
// stop is closed or timeout has passed on clock.
func (s *session) waitIdle(stop <-chan struct{}, clock clockwork.Clock, timeout time.Duration) {
	s.mu.Lock()
	if len(s.held) == 0 || s.gone {
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
	case <-stop:
	case <-t.Chan():
	}
}

// close naks every message still held, so that the server delivers it
// again at once rather than after AckWait, sends the settlements still
// queued, and closes the connection. A message whose item the pipeline
// still works on (a node restart closes the source under it) is then
// delivered again, and its late settlement is dropped: at least once.
// It waits for the acker up to timeout on the source's clock, or until
// stop is closed (Close's context is done); then the copies still to
// publish give up (their messages are nak'd, their failed run counted in
// process: see Source.recount), and close waits for the acker to send the
// rest.
func (s *session) close(stop <-chan struct{}, timeout time.Duration) error {
	close(s.stopTicker)
	s.mu.Lock()
	if !s.gone {
		// Run has returned: no pull request waits at the server.
		s.pending = append(s.pending, s.deferred...)
		for d := range s.held {
			if d.settled.CompareAndSwap(false, true) {
				s.pending = append(s.pending, settle{d: d, how: nak})
			}
		}
	}
	s.deferred = nil
	clear(s.held)
	s.quit = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	t := s.clock.NewTimer(timeout)
	select {
	case <-s.ackerEnd:
	case <-t.Chan():
		s.cancel()
	case <-stop:
		s.cancel()
	}
	t.Stop()
	<-s.ackerEnd
	s.cancel()
	<-s.progressEnd
	return closeConn(s.nc, timeout)
}

// lost returns the error that ends a Run whose connection went away.
func (s *session) lost(stream, consumer string, err error) error {
	s.markGone()
	if err == nil {
		err = natsgo.ErrConnectionClosed
	}
	return resilience.MarkTransient(fmt.Errorf("nats: consume %s/%s: %w: %w", stream, consumer, ErrConnectionLost, err))
}
