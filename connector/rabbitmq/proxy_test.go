package rabbitmq_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/tcpproxy"
)

// A proxy forwards TCP connections to the broker, and can hold back what
// the broker sends (so that confirms are late) or cut every connection (so
// that a client loses it): internal/tcpproxy, under the names these tests
// use.
type proxy struct{ *tcpproxy.Proxy }

func newProxy(t *testing.T, brokerURL string) *proxy { return &proxy{tcpproxy.New(t, brokerURL)} }

func (p *proxy) url(brokerURL string) string { return p.URL(brokerURL) }
func (p *proxy) pause()                      { p.Pause() }
func (p *proxy) resume()                     { p.Resume() }
func (p *proxy) cut()                        { p.Cut() }
func (p *proxy) connections() int            { return p.Connections() }
