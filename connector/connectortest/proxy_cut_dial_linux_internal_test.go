package connectortest

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cut cuts a connection the client has already opened and the proxy
// has accepted but not yet registered (its dial to the broker under
// way): it carries no byte after the Cut.
func TestProxyCutCutsAConnectionBeingDialed(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	f := os.NewFile(uintptr(fd), "slow broker")
	ln, err := net.FileListener(f)
	require.NoError(t, err)
	_ = f.Close()
	t.Cleanup(func() { _ = ln.Close() })
	first, err := net.Dial("tcp", addr) // the one place in the listen queue
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close() })

	p := NewProxy(t, addr)
	c := dialProxy(t, p) // open, for the client; the proxy's SYN to the broker is dropped
	require.Eventually(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.dialing == 1 }, proxyWait, 5*time.Millisecond)
	p.Cut()
	served := make(chan struct{})
	go func() { // free the queue: the proxy's SYN, sent again, gets in
		defer close(served)
		s0, err := ln.Accept()
		if err != nil {
			return
		}
		defer s0.Close()
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(proxyWait))
		_, _ = io.Copy(s, s)
	}()
	t.Cleanup(func() { p.Close(); <-served })
	_, err = c.Write([]byte("x"))
	require.NoError(t, err)
	n, err := c.Read(make([]byte, 1))
	assert.Error(t, err, "a connection open before the Cut is cut (read %d bytes)", n)
}
