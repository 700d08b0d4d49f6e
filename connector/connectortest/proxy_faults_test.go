package connectortest_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// The faults' tests run against an echo server of their own: they need
// no broker. Their waits are on a real network: a fault that holds or
// drops bytes can only be seen by waiting for bytes that do not come
// (quiet, long enough for an echo on a busy machine to come back), and
// every other wait is bounded by faultWait.
const (
	faultWait = 10 * time.Second
	quiet     = 300 * time.Millisecond
)

// dial connects to p, with every read and write bounded by faultWait.
func dial(t *testing.T, p *connectortest.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), faultWait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(faultWait)))
	return c
}

// roundTrip writes b to c, reads as many bytes back, and returns them and
// how long that took.
func roundTrip(t *testing.T, c net.Conn, b []byte) ([]byte, time.Duration) {
	t.Helper()
	start := time.Now()
	_, err := c.Write(b)
	require.NoError(t, err)
	got := make([]byte, len(b))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	return got, time.Since(start)
}

// assertQuiet asserts that nothing, neither a byte nor an end, comes from
// c for a while.
func assertQuiet(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(quiet)))
	n, err := c.Read(make([]byte, 1))
	assert.Zero(t, n, msg)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, msg)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(faultWait)))
}

// Latency delays each way by its amount, give or take its jitter: a round
// trip takes at least twice the latency less the jitter, and well under
// a second more than twice the latency plus the jitter. Clear lifts it.
func TestProxyLatency(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("up"))
	p.Latency(80*time.Millisecond, 40*time.Millisecond)
	for range 3 {
		got, took := roundTrip(t, c, []byte("slow"))
		assert.Equal(t, "slow", string(got))
		assert.GreaterOrEqual(t, took, 2*40*time.Millisecond, "each way at least 80 ms less 40 ms")
		assert.Less(t, took, 2*120*time.Millisecond+time.Second, "each way at most 80 ms plus 40 ms, and a busy machine")
	}
	later := dial(t, p)
	_, took := roundTrip(t, later, []byte("new"))
	assert.GreaterOrEqual(t, took, 80*time.Millisecond, "a connection opened later is as slow")

	p.Clear()
	fastest := time.Hour
	for range 5 {
		_, took := roundTrip(t, c, []byte("fast"))
		fastest = min(fastest, took)
	}
	assert.Less(t, fastest, 80*time.Millisecond, "lifted, the latency is gone")
	assert.Equal(t, 2, p.Connections())
}

// Bandwidth limits each way: 60 000 bytes at 100 KB/s take at least
// about half a second to go and come back, and arrive unchanged.
func TestProxyBandwidth(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("up"))
	p.Bandwidth(100)
	want := make([]byte, 60_000)
	_, _ = rand.Read(want)
	got, took := roundTrip(t, c, want)
	assert.True(t, bytes.Equal(want, got), "the bytes came back unchanged")
	// The last 10 000 bytes (toxiproxy's 100 ms piece at this rate) may
	// pass at once, but not the 50 000 before them.
	assert.GreaterOrEqual(t, took, 500*time.Millisecond, "60 000 bytes at 100 000 bytes a second")
	assert.Less(t, took, 5*time.Second, "the limit is 100 KB/s, not less")
}

// Bandwidth(0) and Bandwidth(-1) set no limit, as Clear does: every byte
// passes, unchanged (toxiproxy's toxic would block everything at 0 and
// panic below it).
func TestProxyBandwidthZeroOrLessIsNoLimit(t *testing.T) {
	t.Parallel()
	for _, rate := range []int64{0, -1} {
		p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
		c := dial(t, p)
		roundTrip(t, c, []byte("up"))
		p.Bandwidth(rate)
		want := make([]byte, 60_000)
		_, _ = rand.Read(want)
		got, _ := roundTrip(t, c, want)
		assert.True(t, bytes.Equal(want, got), "rate %d: the bytes came back unchanged", rate)
		later := dial(t, p)
		got, _ = roundTrip(t, later, []byte("new"))
		assert.Equal(t, "new", string(got), "rate %d: a connection opened later passes too", rate)
	}
}

// Slicer cuts what passes into small pieces, and every byte arrives, in
// order.
func TestProxySlicer(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	c := dial(t, p)
	p.Slicer(7, 5, time.Microsecond)
	want := make([]byte, 20_000)
	_, _ = rand.Read(want)
	got, _ := roundTrip(t, c, want)
	assert.True(t, bytes.Equal(want, got), "the bytes came back unchanged")
	assert.Panics(t, func() { p.Slicer(5, 5, 0) }, "a variation as large as the size")
}

// Silence drops what either side sends and closes nothing, on the open
// connection and on one opened while it lasts; Clear closes both (their
// streams lost bytes), and a new connection is sound.
func TestProxySilenceThenClearReconnects(t *testing.T) {
	t.Parallel()
	e := connectortest.NewEcho(t)
	p := connectortest.NewProxy(t, e.Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Silence()
	later := dial(t, p)
	for _, conn := range []net.Conn{c, later} {
		_, err := conn.Write([]byte("lost"))
		require.NoError(t, err, "a silent link takes bytes")
		assertQuiet(t, conn, "no byte and no end on a silent link")
	}
	assert.EqualValues(t, 1, e.Read(), "nothing reached the server")

	p.Clear()
	for _, conn := range []net.Conn{c, later} {
		_, err := io.ReadAll(conn)
		require.NoError(t, err, "Clear closed the silenced connection (EOF, within the bound)")
	}
	again := dial(t, p)
	got, _ := roundTrip(t, again, []byte("b"))
	assert.Equal(t, "b", string(got), "a connection after Clear is sound")
	assert.Equal(t, 3, p.Connections())
}

// Reset closes a connection with an RST at its next byte: the open one
// and one opened while it lasts. After Clear a new connection is sound.
func TestProxyReset(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Reset()
	later := dial(t, p)
	for _, conn := range []net.Conn{c, later} {
		_, err := conn.Write([]byte("b"))
		require.NoError(t, err)
		_, err = io.ReadAll(conn)
		assert.True(t, errors.Is(err, syscall.ECONNRESET), "reset, not closed: %v", err)
	}
	p.Clear()
	got, _ := roundTrip(t, dial(t, p), []byte("c"))
	assert.Equal(t, "c", string(got))
}

// Partition lets nothing through either way, on the open connection and
// on one opened while it lasts, and Clear delivers what was held, in
// order, with nothing lost.
func TestProxyPartitionHoldsThenReleases(t *testing.T) {
	t.Parallel()
	e := connectortest.NewEcho(t)
	p := connectortest.NewProxy(t, e.Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Partition()
	later := dial(t, p)
	for _, conn := range []net.Conn{c, later} {
		for _, b := range []string{"he", "ld"} {
			_, err := conn.Write([]byte(b))
			require.NoError(t, err)
		}
		assertQuiet(t, conn, "nothing comes back while partitioned")
	}
	assert.EqualValues(t, 1, e.Read(), "nothing reached the server while partitioned")

	p.Clear()
	for _, conn := range []net.Conn{c, later} {
		got := make([]byte, 4)
		_, err := io.ReadFull(conn, got)
		require.NoError(t, err)
		assert.Equal(t, "held", string(got), "the held bytes, in order")
		got, _ = roundTrip(t, conn, []byte("after"))
		assert.Equal(t, "after", string(got), "and the connection goes on")
	}
	assert.Equal(t, 2, p.Connections())
}
