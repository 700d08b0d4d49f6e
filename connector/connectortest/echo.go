package connectortest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// An Echo is a TCP server on 127.0.0.1 that writes back every byte it
// reads: a peer for trying a [Proxy]'s faults without a broker.
type Echo struct {
	addr string
	read atomic.Int64
}

// NewEcho starts an Echo. It stops when t ends: its listener and every
// connection it accepted are closed, and NewEcho's cleanup waits for its
// goroutines.
func NewEcho(t testing.TB) *Echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "connectortest: listen for an echo server")
	e := &Echo{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { e.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

// serve writes back what c sends until c fails or closes.
func (e *Echo) serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		e.read.Add(int64(n))
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Addr returns the server's host:port.
func (e *Echo) Addr() string { return e.addr }

// Read returns how many bytes the server has read, on every connection.
func (e *Echo) Read() int64 { return e.read.Load() }
