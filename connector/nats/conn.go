package nats

import (
	"context"
	"fmt"
	neturl "net/url"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
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
