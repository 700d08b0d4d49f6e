//go:build linux

package connectortest

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Close cancels the proxy's dial to the broker: a broker that does not
// answer (its listen queue full, so that Linux drops the proxy's SYN and
// the dial waits out its 10 s timeout) holds up neither Close nor the
// end of the test.
func TestProxyCloseCancelsADial(t *testing.T) {
	t.Parallel()
	addr := unanswering(t)
	p := NewProxy(t, addr)
	c, err := net.DialTimeout("tcp", p.Addr(), proxyWait)
	require.NoError(t, err, "the proxy's own listener answers")
	t.Cleanup(func() { _ = c.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Close()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // half the dial's timeout
		require.FailNow(t, "Close did not return: it waits out the dial to the broker")
	}
	require.Zero(t, p.Connections(), "the dial never succeeded")
}

// unanswering returns the address of a listener on 127.0.0.1 that never
// accepts, with a listen queue of one, already taken: a dial to it waits
// for its timeout. It closes when t ends.
func unanswering(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "unanswering")
	t.Cleanup(func() { _ = f.Close() })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	first, err := net.DialTimeout("tcp", addr, proxyWait)
	require.NoError(t, err, "the one place in the listen queue")
	t.Cleanup(func() { _ = first.Close() })
	_, err = net.DialTimeout("tcp", addr, 200*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "the queue is full: a second dial gets no answer")
	require.True(t, ne.Timeout(), "the queue is full: a second dial times out, not refused: %v", err)
	return addr
}
