package connectortest

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failed Accept (EMFILE here: out of descriptors for a moment) does
// not end the accept loop: once descriptors are free again, a new
// connection is served. The test runs in a child, whose limit it lowers.
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
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	low := old
	low.Cur = uint64(len(fds)) - 1 // one free slot (the listing's own): the client's socket, not the proxy's accept
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	c1 := dialProxy(t, p)
	_, _ = c1.Write([]byte("b"))
	_ = c1.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, _ = c1.Read(make([]byte, 1)) // the proxy tried (and failed) to accept or dial
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old))
	c2 := dialProxy(t, p) // descriptors to spare again
	assert.Equal(t, "c", string(echo(t, c2, []byte("c"))), "a connection after the shortage is served")
}
