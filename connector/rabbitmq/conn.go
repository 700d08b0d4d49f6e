package rabbitmq

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dial opens a connection to url within timeout and ctx, and names it
// for the broker's management tools.
func dial(ctx context.Context, url, name string, timeout time.Duration) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	var (
		mu  sync.Mutex
		raw net.Conn
	)
	cfg := amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The deadline covers the AMQP handshake; the library clears it
			// once the connection is open.
			if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			mu.Lock()
			raw = c
			mu.Unlock()
			return c, nil
		},
	}
	// ctx ends the handshake too: a broker that accepted the TCP
	// connection and went silent does not hold the caller for timeout.
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if raw != nil {
			_ = raw.SetDeadline(time.Now())
		}
	})
	conn, err := amqp.DialConfig(url, cfg)
	if !stop() && err == nil {
		// ctx ended as the handshake finished: the deadline may be set.
		_ = conn.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		return nil, classify(fmt.Errorf("rabbitmq: connect to %s: %w", redact(url), err))
	}
	return conn, nil
}

// closeConn closes conn within timeout. Closing a connection closes its
// channels, and the broker requeues every message they had not acked.
// An error of a connection that was already gone is not a failure.
func closeConn(conn *amqp.Connection, timeout time.Duration) error {
	if conn == nil || conn.IsClosed() {
		return nil
	}
	if err := conn.CloseDeadline(time.Now().Add(timeout)); err != nil && !connectionLost(err) {
		return fmt.Errorf("rabbitmq: close connection: %w", err)
	}
	return nil
}

// redact returns url for an error, without its password.
func redact(url string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
