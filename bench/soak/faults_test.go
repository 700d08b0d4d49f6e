package main

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
)

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	_, err := io.WriteString(c, msg+"\n")
	require.NoError(t, err)
	got, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, msg+"\n", got)
}

// Every network fault of the schedule applies to the proxy and lifts with
// Clear: a connection opened after is sound, and one open through a fault
// that neither drops nor cuts (latency, bandwidth, partition) goes on.
func TestNetworkFaultsLiftToASoundLink(t *testing.T) {
	t.Parallel()
	for _, kind := range faultKinds {
		if kind == faultKill {
			continue
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := connectortest.NewProxy(t, connectortest.NewEcho(t).Addr())
			dial := func() (net.Conn, *bufio.Reader) {
				c, err := net.DialTimeout("tcp", p.Addr(), 10*time.Second)
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
				return c, bufio.NewReader(c)
			}
			c, r := dial()
			roundTrip(t, c, r, "before")
			injectFault(p, kind)
			keeps := kind == faultLatency || kind == faultBandwidth || kind == faultPartition
			if keeps {
				_, err := io.WriteString(c, "during\n")
				require.NoError(t, err)
			}
			p.Clear()
			if keeps {
				got, err := r.ReadString('\n')
				require.NoError(t, err)
				assert.Equal(t, "during\n", got)
			}
			c2, r2 := dial()
			roundTrip(t, c2, r2, "after")
		})
	}
	assert.Panics(t, func() { injectFault(nil, faultKill) }, "kill is no network fault")
}
