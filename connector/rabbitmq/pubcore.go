package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// pubCore publishes messages on one connection, reconnecting when it is
// lost; it is the untyped heart of [Publisher] and [DeadLetterPublisher].
type pubCore struct {
	url, name    string
	exchange     string // checked to exist at connect; "" is the default exchange
	mandatory    bool
	confirms     Confirms
	retry        PubRetry
	dialTimeout  time.Duration
	closeTimeout time.Duration
	clock        clockwork.Clock

	// reopen says that close ends publishing until the next open (a
	// Publisher); without it a publish after close connects again (a
	// DeadLetterPublisher, which has no Open).
	reopen bool

	mu   sync.Mutex // guards sess; serialises publishing on its channel
	sess *pubSession
	// closed: closed, and reopen: publish fails until open. Set before
	// close takes mu, so that a session dialled meanwhile sees it.
	closed atomic.Bool
	// closes counts the closes that set closed: a Write that began
	// before one is not refused as a Write after Close.
	closes atomic.Uint64
	// live is sess, for close, which must not wait for mu: a publish
	// stuck writing to a broker that does not read holds it.
	live atomic.Pointer[pubSession]

	amu     sync.Mutex // publishes sent without waiting for their confirm
	async   []*publish
	failed  []error // the first maxKept failures since the last flush
	nFailed int

	// resent counts the publishes confirmed after a retry of an attempt
	// whose confirm never came: each may be at the broker twice.
	resent atomic.Int64
}

// maxKept is how many failures of publishes sent without waiting a
// publisher keeps to report; it counts the rest.
const maxKept = 10

// connect opens a connection and a channel in confirm mode when confirms
// are on, and checks that the exchange exists, so that a missing exchange
// fails at Open rather than at the first message.
func (c *pubCore) connect(ctx context.Context) (*pubSession, error) {
	conn, err := dial(ctx, c.url, c.name, c.dialTimeout)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil && c.exchange != "" {
		if err = ch.ExchangeDeclarePassive(c.exchange, amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
			err = fmt.Errorf("rabbitmq: exchange %q: %w", c.exchange, err)
		}
	}
	if err == nil && c.confirms.Enabled {
		// Listen before confirm mode starts, so that no confirm is missed.
		s := newPubSession(conn, ch, true)
		if err = ch.Confirm(false); err == nil {
			return s, nil
		}
		_ = s.close(c.closeTimeout)
		return nil, classify(fmt.Errorf("rabbitmq: confirm mode: %w", err))
	}
	if err != nil {
		_ = closeConn(conn, c.closeTimeout)
		return nil, classify(err)
	}
	return newPubSession(conn, ch, false), nil
}

// open connects unless a working session is there already.
func (c *pubCore) open(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed.Store(false)
	_, err := c.session(ctx)
	return err
}

// session returns a working session, replacing a broken one. c.mu is held.
func (c *pubCore) session(ctx context.Context) (*pubSession, error) {
	if c.closed.Load() {
		// A write after Close is the program's error: a connection
		// dialled now would be closed by nothing.
		return nil, resilience.MarkPermanent(fmt.Errorf("rabbitmq: publish after Close: %w", ErrNotOpen))
	}
	if c.sess != nil && !c.sess.broken() {
		return c.sess, nil
	}
	if c.sess != nil {
		c.live.CompareAndSwap(c.sess, nil)
		_ = c.sess.close(c.closeTimeout)
		c.sess = nil
	}
	s, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.sess = s
	c.live.Store(s)
	if c.closed.Load() && c.live.CompareAndSwap(s, nil) {
		// Close came while this dialled, and did not see it.
		c.sess = nil
		_ = s.close(c.closeTimeout)
		return nil, blameless(fmt.Errorf("rabbitmq: the publisher closed while it connected: %w", ErrNotOpen))
	}
	return s, nil
}

// publish sends msg and, when confirms are on with WaitFor, waits for its
// confirm. A publish that fails for a lost connection (before the broker
// took it, or before its confirm came) is retried under PubRetry; one
// confirmed after a retry of an attempt whose confirm never came counts
// in resent. The broker's answers (a nack, a return, a refusal) and a
// confirm timeout are returned as they are.
func (c *pubCore) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	return c.publishSince(ctx, c.closes.Load(), exchange, key, msg)
}

// publishSince is publish for a Write that began when c.closes was
// closes: a Close after that is a Close during the Write, not before it.
func (c *pubCore) publishSince(ctx context.Context, closes uint64, exchange, key string, msg amqp.Publishing) error {
	// sent is the error of the last attempt that may have reached the
	// broker (its confirm never came), while later attempts fail
	// before they send: the outcome stays unknown.
	var sent error
	for attempt := 1; ; attempt++ {
		p, err := c.send(ctx, exchange, key, msg)
		if err == nil {
			switch {
			case p == nil:
				return nil
			case !c.confirms.WaitFor:
				c.track(p)
				return nil
			}
			if err = c.await(ctx, p, c.confirms.Timeout); err == nil || !connectionLost(err) {
				if err == nil && sent != nil {
					c.resent.Add(1) // confirmed, and perhaps also before
				}
				if err != nil && sent != nil && !errors.Is(err, ErrOutcomeUnknown) {
					// The broker answered a retry (a nack); an earlier
					// attempt may have reached it all the same.
					return outcomeUnknown(fmt.Errorf("%w (an earlier attempt's confirm never came: %w)", err, sent))
				}
				return err // classified by await
			}
			sent = err
		}
		if ctx.Err() != nil {
			if sent != nil {
				return outcomeUnknown(fmt.Errorf("%w (after an attempt whose confirm never came: %w)", context.Cause(ctx), sent))
			}
			return context.Cause(ctx)
		}
		if errors.Is(err, ErrNotOpen) && (attempt > 1 || c.closes.Load() != closes) || connectionLost(err) && c.isClosed() {
			// Closed during this Write: not the message's fault. (err may
			// be the permanent refusal of a publish after Close.)
			if sent != nil {
				return blameless(outcomeUnknown(fmt.Errorf("%w (the publisher closed before its retry: %w)", sent, ErrNotOpen)))
			}
			return blameless(fmt.Errorf("rabbitmq: the publisher closed during the Write, before its retry: %w", ErrNotOpen))
		}
		if !connectionLost(err) {
			if sent != nil {
				// The broker answered a retry; an earlier attempt may
				// have reached it all the same.
				return outcomeUnknown(fmt.Errorf("%w (an earlier attempt's confirm never came: %w)", classify(err), sent))
			}
			return classify(err)
		}
		if sent != nil && !errors.Is(err, ErrOutcomeUnknown) {
			err = outcomeUnknown(fmt.Errorf("%w (an earlier attempt's confirm never came: %w)", err, sent))
		}
		if !c.retry.Enabled {
			return blameless(err)
		}
		if attempt > c.retry.MaxRetry {
			return resilience.MarkBlameless(resilience.MarkRetried(fmt.Errorf("rabbitmq: publish gave up after %d attempts: %w", attempt, err), attempt))
		}
		if err := broker.Wait(ctx, c.clock, c.retry.Delay); err != nil {
			if sent != nil {
				return outcomeUnknown(fmt.Errorf("%w (after an attempt whose confirm never came: %w)", err, sent))
			}
			return err
		}
	}
}

// isClosed reports whether close ended publishing until the next open.
func (c *pubCore) isClosed() bool { return c.closed.Load() }

// send publishes msg on the current session, connecting first if needed,
// and returns the publish to wait for when confirms are on.
func (c *pubCore) send(ctx context.Context, exchange, key string, msg amqp.Publishing) (*publish, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	var p *publish
	if c.confirms.Enabled {
		p = &publish{sess: s, seq: s.ch.GetNextPublishSeqNo(), exchange: exchange, routingKey: key, sent: c.clock.Now(), done: make(chan struct{})}
		if c.mandatory {
			msg.Headers = maps.Clone(msg.Headers)
			if msg.Headers == nil {
				msg.Headers = amqp.Table{}
			}
			msg.Headers[SeqHeader] = int64(p.seq)
		}
		if err := s.register(p); err != nil {
			// The channel closed before this was sent: whatever closed
			// it, a new channel is the way on.
			return nil, fmt.Errorf("rabbitmq: publish to exchange %q with key %q: %w: %w", exchange, key, ErrConnectionLost, err)
		}
	}
	if err := ctx.Err(); err != nil {
		if p != nil {
			s.forget(p)
		}
		return nil, context.Cause(ctx) // not sent
	}
	// The library looks at ctx only before it writes: a write still stuck
	// closeTimeout after ctx ended, on a broker that does not read (a
	// resource alarm), is ended by closing the connection, whose deadline
	// ends the write. Only a write still going: the connection is shared,
	// and a close fails every publish waiting on it.
	var (
		wmu     sync.Mutex
		writing = true
	)
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(c.closeTimeout, func() {
			wmu.Lock()
			defer wmu.Unlock()
			if writing {
				_ = s.conn.CloseDeadline(time.Now())
			}
		})
	})
	err = s.ch.PublishWithContext(ctx, exchange, key, c.mandatory, false, msg)
	wmu.Lock()
	writing = false
	wmu.Unlock()
	stop()
	if err != nil {
		if p != nil {
			s.forget(p)
		}
		return nil, fmt.Errorf("rabbitmq: publish to exchange %q with key %q: %w", exchange, key, err)
	}
	return p, nil
}

// await waits for p's confirm, for at most timeout.
func (c *pubCore) await(ctx context.Context, p *publish, timeout time.Duration) error {
	expired := make(chan time.Time, 1)
	var timer <-chan time.Time = expired
	if timeout > 0 {
		t := c.clock.NewTimer(timeout)
		defer t.Stop()
		timer = t.Chan()
	} else {
		expired <- time.Time{}
	}
	select {
	case <-p.done:
		return p.err
	default:
	}
	select {
	case <-p.done:
		return p.err
	case <-timer:
		if p.sess.forget(p) {
			return blameless(&ConfirmError{Exchange: p.exchange, RoutingKey: p.routingKey, Timeout: c.confirms.Timeout})
		}
	case <-ctx.Done():
		if p.sess.forget(p) {
			return outcomeUnknown(context.Cause(ctx)) // sent: the broker may have it
		}
	}
	<-p.done // answered while we gave up: take the answer
	return p.err
}

// track keeps p, sent without waiting, for flush; it also settles the
// oldest publishes already answered, so that the list stays short.
func (c *pubCore) track(p *publish) {
	c.amu.Lock()
	defer c.amu.Unlock()
	c.async = append(c.async, p)
	n := 0
	for _, q := range c.async {
		select {
		case <-q.done:
			c.keep(q.err)
			n++
			continue
		default:
		}
		break
	}
	c.async = c.async[n:]
}

// flush waits for the confirm of every publish sent without waiting, each
// for at most the confirm timeout from when it was sent, and reports the
// ones that failed.
func (c *pubCore) flush(ctx context.Context) error {
	c.amu.Lock()
	async := c.async
	c.async = nil
	c.amu.Unlock()
	for _, p := range async {
		err := c.await(ctx, p, c.confirms.Timeout-c.clock.Since(p.sent))
		c.amu.Lock()
		c.keep(err)
		c.amu.Unlock()
	}
	c.amu.Lock()
	failed, n := c.failed, c.nFailed
	c.failed, c.nFailed = nil, 0
	c.amu.Unlock()
	if n == 0 {
		return nil
	}
	return resilience.MarkPermanent(fmt.Errorf("rabbitmq: %d publishes not confirmed (sent without waiting, so they cannot be retried one by one): %w",
		n, errors.Join(failed...)))
}

// keep records the failure of a publish sent without waiting. c.amu is
// held.
func (c *pubCore) keep(err error) {
	if err == nil {
		return
	}
	c.nFailed++
	if len(c.failed) < maxKept {
		c.failed = append(c.failed, err)
	}
}

// close closes the session, if any. It closes the live session before
// it takes mu: a publish stuck writing to a broker that does not read
// holds mu, and the close's deadline on the connection ends its write.
func (c *pubCore) close() error {
	var err error
	if c.reopen {
		c.closed.Store(true)
		c.closes.Add(1)
	}
	s := c.live.Swap(nil)
	if s != nil {
		err = s.close(c.closeTimeout)
	}
	if c.reopen {
		// No need of mu, which a Write may hold while it dials: a
		// session dialled now sees closed and closes itself.
		return err
	}
	c.mu.Lock()
	rest := c.sess
	c.sess = nil
	c.mu.Unlock()
	if rest != nil && rest != s {
		// Dialled by a publish between the two steps.
		err = errors.Join(err, rest.close(c.closeTimeout))
	}
	return err
}
