package connectortest

import (
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/stretchr/testify/require"
)

// Close interrupts the running toxics and returns at once, though a
// latency of an hour holds a byte the server sent.
func TestProxyCloseInterruptsLatency(t *testing.T) {
	t.Parallel()
	e := NewEcho(t)
	p := NewProxy(t, e.Addr())
	c := dialProxy(t, p)
	echo(t, c, []byte("a"))
	p.set(nil, &toxics.LatencyToxic{Latency: time.Hour.Milliseconds()}, true, true)
	_, err := c.Write([]byte("b"))
	require.NoError(t, err)
	// The server read "b" and sent it back: the latency has it in hand
	// (give or take the microseconds the proxy takes to read it).
	require.Eventually(t, func() bool { return e.Read() == 2 }, proxyWait, 5*time.Millisecond)
	returns(t, p.Close, "Close")
}

// returns runs f and requires it to return within proxyWait.
func returns(t *testing.T, f func(), what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(proxyWait):
		require.FailNow(t, what+" did not return: it waits out a toxic or a dial")
	}
}
