package nats

import (
	"context"
	"fmt"
	neturl "net/url"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// DeadLinkBound is how soon a source or a publisher gives up a connection
// that went silent (a half-open link: no RST, no FIN, no bytes): a
// watchdog looks at the connection every second, and gives it up once
// neither a message nor an answer to a ping arrived for DeadLinkBound, so
// at most DeadLinkBound and a second after the last byte. Whenever
// nothing arrived for DeadLinkBound/3 it pings the server, so that an idle
// but live link answers well within the bound. A slow link that is still
// delivering is kept however long a pulled batch takes to arrive: the
// server's answer to a ping queues behind the batch, but the batch's bytes
// are proof of life. Giving a connection up ends the source's Run with
// [ErrConnectionLost] (node restart opens a new connection) and the
// publisher's attempt. The client's own pings are off: they count
// unanswered pings, not silence, and gave up slow links that delivered.
const DeadLinkBound = 15 * time.Second

const (
	// probeAfter is how long the watchdog waits in silence before it
	// pings the server.
	probeAfter = DeadLinkBound / 3
	// watchTick is how often the watchdog looks at the connection.
	watchTick = time.Second
)

// dial connects to url within timeout and ctx, and names the connection
// for the server's monitoring. The client's own reconnection is off: a
// lost connection ends the source's Run (node restart opens a new one) or
// the publisher's attempt (its retry opens a new one), as with the
// RabbitMQ connector, so that acks never wait in a client buffer for a
// server that may already have given their messages to someone else.
// closed is closed once the connection is.
func dial(ctx context.Context, url, name string, timeout time.Duration) (nc *natsgo.Conn, closed <-chan struct{}, err error) {
	done := make(chan struct{})
	type result struct {
		nc  *natsgo.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		nc, err := natsgo.Connect(url, natsgo.Name(name), natsgo.Timeout(timeout), natsgo.NoReconnect(),
			// The watchdog probes the link; the client's own pings would
			// give up a slow link whose answer queues behind a batch.
			natsgo.PingInterval(0),
			natsgo.ClosedHandler(func(*natsgo.Conn) { close(done) }),
			// Errors reach the caller; the client's default handler would
			// print them.
			natsgo.ErrorHandler(func(*natsgo.Conn, *natsgo.Subscription, error) {}))
		res <- result{nc, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, nil, classify(fmt.Errorf("nats: connect to %s: %w", redact(url), r.err))
		}
		go watch(r.nc, done)
		return r.nc, done, nil
	case <-ctx.Done():
		// The dial ends within timeout; its connection, if any, is closed.
		go func() {
			if r := <-res; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, nil, fmt.Errorf("nats: connect to %s: %w", redact(url), context.Cause(ctx))
	}
}

// watch gives nc up once nothing arrived on it for DeadLinkBound (see
// there): a message's bytes or the answer to a ping are proof of life. It
// returns once done (closed with the connection) is closed, after its
// ping in flight, if any, has ended.
func watch(nc *natsgo.Conn, done <-chan struct{}) {
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	var (
		seen    = nc.Stats().InBytes
		alive   = time.Now()
		pong    = make(chan error, 1)
		probing bool
	)
	defer func() {
		if probing {
			<-pong // a flush ends once the connection is closed
		}
	}()
	for {
		select {
		case <-done:
			return
		case err := <-pong:
			probing = false
			if err == nil {
				alive = time.Now()
			}
			continue
		case <-tick.C:
		}
		now := time.Now()
		if in := nc.Stats().InBytes; in != seen {
			seen, alive = in, now
		}
		silent := now.Sub(alive)
		if silent >= DeadLinkBound {
			nc.Close()
			return
		}
		if !probing && silent >= probeAfter {
			probing = true
			go func() { pong <- nc.FlushTimeout(DeadLinkBound) }()
		}
	}
}

// redact returns a server URL, or a comma-separated list of them, for an
// error: each without its password, or its token.
func redact(u string) string {
	parts := strings.Split(u, ",")
	for i, s := range parts {
		p, err := neturl.Parse(strings.TrimSpace(s))
		if err != nil {
			parts[i] = "(a URL that does not parse)"
			continue
		}
		if p.User != nil {
			if _, ok := p.User.Password(); !ok {
				// nats://token@host: the user is a secret.
				p.User = neturl.User("xxxxx")
			}
		}
		parts[i] = p.Redacted()
	}
	return strings.Join(parts, ",")
}

// closeConn sends what the connection still buffers, within timeout, and
// closes it.
func closeConn(nc *natsgo.Conn, timeout time.Duration) error {
	if nc == nil || nc.IsClosed() {
		return nil
	}
	err := nc.FlushTimeout(timeout)
	nc.Close()
	if err != nil && !connectionLost(err) {
		return fmt.Errorf("nats: flush before close: %w", err)
	}
	return nil
}
