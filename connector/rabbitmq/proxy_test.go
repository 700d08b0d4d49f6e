package rabbitmq_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// A proxy forwards TCP connections to the broker, and can hold back what
// the broker sends (so that confirms are late) or cut every connection (so
// that a client loses it): connectortest's Proxy, on toxiproxy's toxics,
// under the names these tests use.
type proxy struct{ *connectortest.Proxy }

func newProxy(t *testing.T, brokerURL string) *proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	return &proxy{connectortest.NewProxy(t, u.Host)}
}

func (p *proxy) url(brokerURL string) string { return p.URL(brokerURL) }
func (p *proxy) pause()                      { p.Pause() }
func (p *proxy) resume()                     { p.Resume() }
func (p *proxy) cut()                        { p.Cut() }
func (p *proxy) connections() int            { return p.Connections() }
