package connectortest_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// closeWrite half-closes c: the peer reads to EOF, and c can still read.
func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
}

// A half-close is forwarded after the bytes before it: the client sends
// and closes its side, the server reads to EOF and answers, and the
// client reads the answer (held back a while by latency) and then EOF.
func TestProxyForwardsAHalfClose(t *testing.T) {
	t.Parallel()
	e := connectortest.NewEcho(t)
	p := connectortest.NewProxy(t, e.Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Latency(100*time.Millisecond, 0)
	_, err := c.Write([]byte("last"))
	require.NoError(t, err)
	closeWrite(t, c)
	got, err := io.ReadAll(c)
	require.NoError(t, err, "an orderly end after the answer")
	assert.Equal(t, "last", string(got), "the answer sent after the client's half-close")
	assert.EqualValues(t, 5, e.Read())
}

// A half-close on a connection that carries more than every buffer on the
// way: every byte comes back, then EOF, with the client reading slowly
// (a small receive buffer), so that bytes are still on their way when
// both sides are done.
func TestProxyHalfCloseLosesNothing(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	want := make([]byte, 256<<10)
	_, _ = rand.Read(want)
	got := sendAllAndRead(t, dial(t, p), want)
	assert.True(t, bytes.Equal(want, got), "every byte back, in order: %d of %d", len(got), len(want))
}

// Reset, lifted before it fired, leaves the connections' closes orderly:
// a half-close then loses no byte, and ends in EOF, not an RST.
func TestProxyResetThenClearClosesInOrder(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Reset()
	later := dial(t, p) // opened under Reset, before it fired
	p.Clear()
	want := make([]byte, 256<<10)
	_, _ = rand.Read(want)
	for _, conn := range []net.Conn{c, later} {
		got := sendAllAndRead(t, conn, want)
		assert.True(t, bytes.Equal(want, got), "every byte back, in order: %d of %d", len(got), len(want))
	}
}

// Reset fires at a close as at a byte: the client half-closes, and reads
// an RST, not EOF.
func TestProxyResetFiresAtAClose(t *testing.T) {
	t.Parallel()
	p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Reset()
	closeWrite(t, c)
	_, err := io.ReadAll(c)
	assert.ErrorIs(t, err, syscall.ECONNRESET, "reset, not closed")
}

// sendAllAndRead writes b to c and half-closes it, while it reads what
// comes back through a small receive buffer until EOF, which it requires.
func sendAllAndRead(t *testing.T, c net.Conn, b []byte) []byte {
	t.Helper()
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(16<<10))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	require.NoError(t, <-werr)
	require.NoError(t, err, "an orderly end, after %d of %d bytes", len(got), len(b))
	return got
}

// Partition holds a close too: a client sends and closes its side (one
// half, one in full), and nothing (neither a byte nor an end) reaches the
// server until Clear, which delivers the bytes and then the close.
func TestProxyPartitionHoldsAClose(t *testing.T) {
	t.Parallel()
	e := connectortest.NewEcho(t)
	p := connectortest.NewProxy(t, e.Addr())
	c, gone := dial(t, p), dial(t, p)
	roundTrip(t, c, []byte("a"))
	roundTrip(t, gone, []byte("b"))
	p.Partition()
	for _, conn := range []net.Conn{c, gone} {
		_, err := conn.Write([]byte("held"))
		require.NoError(t, err)
	}
	closeWrite(t, c)
	require.NoError(t, gone.Close())
	assertQuiet(t, c, "nothing comes back while partitioned, not even an end")
	assert.EqualValues(t, 2, e.Read(), "nothing reached the server while partitioned")

	p.Clear()
	got, err := io.ReadAll(c)
	require.NoError(t, err, "an orderly end after the held bytes")
	assert.Equal(t, "held", string(got), "the held bytes reached the server, came back, and then EOF")
	require.Eventually(t, func() bool { return e.Read() == 10 }, faultWait, 5*time.Millisecond,
		"the bytes of the client that closed in full reached the server too")
}

// The broker's half-close is forwarded too: the server sends and closes
// its side, the client reads to EOF, and what the client sends next
// still reaches the server, which reads it to the client's own EOF.
func TestProxyForwardsTheBrokersHalfClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	heard := make(chan string, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			heard <- err.Error()
			return
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(faultWait))
		_, _ = s.Write([]byte("bye"))
		_ = s.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(s)
		if err != nil {
			heard <- err.Error()
			return
		}
		heard <- string(b)
	}()
	p := connectortest.NewProxy(t, ln.Addr().String())
	c := dial(t, p)
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the server's half-close reached the client as EOF")
	assert.Equal(t, "bye", string(got))
	_, err = c.Write([]byte("after"))
	require.NoError(t, err, "the client's side is still open")
	closeWrite(t, c)
	assert.Equal(t, "after", <-heard, "the server read what the client sent after the server's half-close, then EOF")
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "both sides closed: the connection is done")
}

// Pause holds the broker's close too: the server answers and closes
// (after the client's half-close), and the client gets neither until
// Resume, which delivers the answer and then EOF.
func TestProxyPauseHoldsAClose(t *testing.T) {
	t.Parallel()
	e := connectortest.NewEcho(t)
	p := connectortest.NewProxy(t, e.Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Pause()
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	closeWrite(t, c)
	require.Eventually(t, func() bool { return e.Read() == 5 }, faultWait, 5*time.Millisecond,
		"what the client sends passes under Pause")
	assertQuiet(t, c, "nothing comes back while paused, not even an end")

	p.Resume()
	got, err := io.ReadAll(c)
	require.NoError(t, err, "an orderly end after the held bytes")
	assert.Equal(t, "held", string(got))
}

// Silence holds a close back: the client closes its side and sees no end
// while the link is silent; Clear then closes the connection.
func TestProxySilenceHoldsAClose(t *testing.T) {
	t.Parallel()
	e := connectortest.NewEcho(t)
	p := connectortest.NewProxy(t, e.Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.Silence()
	_, err := c.Write([]byte("lost"))
	require.NoError(t, err)
	closeWrite(t, c)
	assertQuiet(t, c, "no byte and no end on a silent link, though the client closed its side")
	assert.EqualValues(t, 1, e.Read(), "nothing reached the server")

	p.Clear()
	got, err := io.ReadAll(c)
	require.NoError(t, err, "Clear closed the silenced connection (EOF, within the bound)")
	assert.Empty(t, got, "what the client sent under Silence was dropped")
}
