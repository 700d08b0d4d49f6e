package connectortest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The proxy's tests run against an echo server of their own: they need no
// broker. Their waits are on a real network, each bounded by proxyWait.
const proxyWait = 10 * time.Second

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), proxyWait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(proxyWait)))
	return c
}

// echo writes b and reads as many bytes back.
func echo(t *testing.T, c net.Conn, b []byte) []byte {
	t.Helper()
	_, err := c.Write(b)
	require.NoError(t, err)
	got := make([]byte, len(b))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	return got
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// Every byte passes, unchanged, in order, one way and back, under each
// toxic that neither drops nor cuts: none, latency with jitter, a
// bandwidth limit, a slicer.
func TestProxyPassesEveryByte(t *testing.T) {
	t.Parallel()
	for name, toxic := range map[string]func() toxics.Toxic{
		"none":      func() toxics.Toxic { return nil },
		"latency":   func() toxics.Toxic { return &toxics.LatencyToxic{Latency: 5, Jitter: 4} },
		"bandwidth": func() toxics.Toxic { return &toxics.BandwidthToxic{Rate: 1024} },
		"slicer":    func() toxics.Toxic { return &toxics.SlicerToxic{AverageSize: 7, SizeVariation: 5, Delay: 1} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := NewProxy(t, NewEcho(t).Addr())
			c := dialProxy(t, p)
			want := randomBytes(200 << 10)
			got := echo(t, c, want[:1]) // the connection is up
			p.set(toxic(), toxic(), true, true)
			got = append(got, echo(t, c, want[1:])...)
			assert.True(t, bytes.Equal(want, got), "the bytes came back unchanged")
			assert.Equal(t, 1, p.Connections())
		})
	}
}

// Latency delays each chunk by about its amount, each way.
func TestProxyLatencyDelays(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("x"))
	p.set(&toxics.LatencyToxic{Latency: 100}, &toxics.LatencyToxic{Latency: 100}, true, true)
	start := time.Now()
	echo(t, c, []byte("y"))
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "100 ms each way")
	p.set(nil, nil, true, true)
	start = time.Now()
	echo(t, c, []byte("z"))
	assert.Less(t, time.Since(start), took, "lifted, the latency is gone")
}

// Pause holds back what the server sends, on the open connection and on
// one opened while it holds, and Resume lets it through, nothing lost.
func TestProxyPauseHoldsAndResumeReleases(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("a"))
	p.Pause()
	later := dialProxy(t, p)
	for _, conn := range []net.Conn{c, later} {
		_, err := conn.Write([]byte("held"))
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
		_, err = conn.Read(make([]byte, 4))
		var ne net.Error
		require.ErrorAs(t, err, &ne, "nothing comes back while paused")
		require.True(t, ne.Timeout())
	}
	p.Resume()
	for _, conn := range []net.Conn{c, later} {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(proxyWait)))
		got := make([]byte, 4)
		_, err := io.ReadFull(conn, got)
		require.NoError(t, err)
		assert.Equal(t, "held", string(got))
	}
}

// Cut closes the open connections and accepts new ones.
func TestProxyCutClosesAndAcceptsAgain(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("a"))
	p.Cut()
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err, "the cut connection is closed")
	again := dialProxy(t, p)
	assert.Equal(t, "b", string(echo(t, again, []byte("b"))))
	assert.Equal(t, 2, p.Connections())
}

// reset_peer resets the connection at its next byte: the client reads
// ECONNRESET, not an orderly EOF.
func TestProxyResetPeerResets(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("a"))
	p.set(&toxics.ResetToxic{}, &toxics.ResetToxic{}, true, false)
	_, err := c.Write([]byte("b"))
	require.NoError(t, err)
	_, err = c.Read(make([]byte, 1))
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "reset, not closed: %v", err)
	// New connections are sound: the toxic was for the open ones.
	assert.Equal(t, "c", string(echo(t, dialProxy(t, p), []byte("c"))))
}

// timeout silences the open connection both ways without closing it:
// the client sees neither bytes nor an end, as on a half-open link.
func TestProxyTimeoutIsSilent(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("a"))
	p.set(&toxics.TimeoutToxic{}, &toxics.TimeoutToxic{}, true, false)
	_, err := c.Write([]byte("b"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "no byte and no end: %v", err)
	assert.Equal(t, "c", string(echo(t, dialProxy(t, p), []byte("c"))), "a new connection is sound")
}

// Close ends every goroutine of the proxy, with connections open under a
// toxic that holds bytes, and refuses new connections.
func TestProxyCloseEndsEverything(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("a"))
	p.Pause()
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), proxyWait)
	defer cancel()
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		require.FailNow(t, "Close did not return: a goroutine of the proxy is stuck")
	}
	_, err = net.DialTimeout("tcp", p.Addr(), proxyWait)
	assert.Error(t, err, "a closed proxy refuses connections")
}
