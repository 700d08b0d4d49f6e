package connectortest

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failed Accept (EMFILE here: out of descriptors for a moment) does
// not end the accept loop: once descriptors are free again, the
// connection that waited through the shortage and a new one are both
// served. The test runs in a child, whose descriptors it exhausts.
func TestProxyServesAgainAfterAnAcceptError(t *testing.T) {
	if os.Getenv("SLUICE_PROXY_EMFILE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProxyServesAgainAfterAnAcceptError$", "-test.v")
		cmd.Env = append(os.Environ(), "SLUICE_PROXY_EMFILE_CHILD=1")
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "%s", out)
		return
	}
	p := NewProxy(t, NewEcho(t).Addr())
	echo(t, dialProxy(t, p), []byte("a")) // sound before
	failed := make(chan error, 1)
	p.mu.Lock()
	p.acceptFailed = func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	p.mu.Unlock()

	// The client's socket is made before the shortage: a connect takes
	// no descriptor, the proxy's Accept does.
	addr := p.ln.Addr().(*net.TCPAddr)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)

	// Every free descriptor is taken by a file of its own (under a lowered
	// limit, so there are few), whatever the runtime holds at the moment.
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	low := old
	low.Cur = uint64(fd) + 64
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	var fill []int
	for {
		f, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			require.ErrorIs(t, err, syscall.EMFILE)
			break
		}
		fill = append(fill, f)
	}
	var ip [4]byte
	copy(ip[:], addr.IP.To4())
	connectErr := syscall.Connect(fd, &syscall.SockaddrInet4{Port: addr.Port, Addr: ip})
	var acceptErr error
	select {
	case acceptErr = <-failed:
	case <-time.After(proxyWait):
	}
	for _, f := range fill {
		_ = syscall.Close(f)
	}
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old))
	require.NoError(t, connectErr)
	require.ErrorIs(t, acceptErr, syscall.EMFILE, "the proxy's Accept failed during the shortage")

	f := os.NewFile(uintptr(fd), "client")
	c1, err := net.FileConn(f) // a descriptor of its own; f's is closed next
	require.NoError(t, err)
	_ = f.Close()
	t.Cleanup(func() { _ = c1.Close() })
	require.NoError(t, c1.SetDeadline(time.Now().Add(proxyWait)))
	assert.Equal(t, "b", string(echo(t, c1, []byte("b"))), "the connection that waited through the shortage is served")
	c2 := dialProxy(t, p)
	assert.Equal(t, "c", string(echo(t, c2, []byte("c"))), "a connection after the shortage is served")
}
