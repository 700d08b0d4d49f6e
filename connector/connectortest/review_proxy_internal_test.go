package connectortest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProxyToxicChangeOnABackpressuredConnection: a change of
// toxics (Pause here; the fault mode's injection and its lifting go the
// same way, through set) interrupts both stubs of every open connection
// while holding p.change. toxiproxy's NoopToxic sends to its output
// without watching Interrupt, so when one connection's writer is blocked
// (the peer reads nothing: a broker under flow control, a client that
// stopped reading) InterruptToxic waits for that peer, and set with it.
// Meanwhile the accept loop waits for p.change too: the proxy takes no new
// connection, so a connector that reconnects hangs in its handshake. Pause
// concerns only what the broker sends, yet it blocks on the client's
// direction.
//
// Fails deterministically (3 of 3 runs under -race): Pause has not
// returned after 3 s, and the second connection was not accepted.
func TestProxyToxicChangeOnABackpressuredConnection(t *testing.T) {
	// A server that accepts and reads nothing until the test ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		smu   sync.Mutex
		sconn []net.Conn
		swg   sync.WaitGroup
	)
	swg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			smu.Lock()
			sconn = append(sconn, c)
			smu.Unlock()
		}
	})
	p := NewProxy(t, ln.Addr().String())
	paused := make(chan struct{})
	var pauseStarted atomic.Bool
	// Runs before p.Close (cleanups run last-in first-out): the server's
	// side closes, the blocked writer errs, and everything ends.
	t.Cleanup(func() {
		_ = ln.Close()
		smu.Lock()
		for _, c := range sconn {
			_ = c.Close()
		}
		smu.Unlock()
		swg.Wait()
		if pauseStarted.Load() {
			<-paused
		}
	})

	c, err := net.DialTimeout("tcp", p.Addr(), proxyWait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	var written atomic.Int64
	var wwg sync.WaitGroup
	wwg.Go(func() {
		b := make([]byte, 64<<10)
		for range 4096 { // 256 MB at most: far beyond every buffer on the way
			n, err := c.Write(b)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	t.Cleanup(func() { _ = c.Close(); wwg.Wait() })

	// Polled: the client's writes stop once every buffer on the way is
	// full and the proxy's writer is blocked on the server.
	deadline := time.Now().Add(proxyWait)
	last, still := int64(-1), 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for still < 10 {
		require.True(t, time.Now().Before(deadline), "the client's writes never stalled")
		<-tick.C
		if n := written.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	t.Logf("the client wrote %d bytes before the server's side filled", last)

	pauseStarted.Store(true)
	go func() {
		defer close(paused)
		p.Pause()
	}()
	c2, err := net.DialTimeout("tcp", p.Addr(), proxyWait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.Close() })

	select {
	case <-paused:
	case <-time.After(3 * time.Second):
		assert.Fail(t, "Pause did not return within 3 s: a toxic change waits for a peer that reads nothing")
	}
	assert.Eventually(t, func() bool { return p.Connections() == 2 }, 3*time.Second, 20*time.Millisecond,
		"the proxy accepts a new connection while one connection is backpressured")
}
