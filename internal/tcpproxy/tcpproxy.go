// Package tcpproxy forwards TCP connections to a server for tests that
// need what a real server cannot be asked to do: hold back what it sends
// (so that answers are late) or cut every connection (so that a client
// loses it).
package tcpproxy

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/require"
)

// A Proxy forwards TCP connections to the broker, and can hold back what
// the broker sends (so that confirms are late) or cut every connection (so
// that a client loses it), which the real broker cannot be asked to do.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	open     chan struct{} // closed while the broker's bytes flow
	conns    []net.Conn
	accepted int
	closing  chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

// New starts a proxy to the broker of brokerURL; it stops with the
// test.
func New(t testing.TB, brokerURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Proxy{ln: ln, target: u.Host, open: make(chan struct{}), closing: make(chan struct{})}
	close(p.open)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// URL returns brokerURL with the proxy's address.
func (p *Proxy) URL(brokerURL string) string {
	u, _ := url.Parse(brokerURL)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		select {
		case <-p.closing:
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		default:
		}
		p.conns = append(p.conns, client, server)
		p.accepted++
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(client, server, false) })
		p.wg.Go(func() { p.pipe(server, client, true) })
	}
}

// pipe copies from src to dst; the broker's side waits while paused.
func (p *Proxy) pipe(src, dst net.Conn, fromBroker bool) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromBroker {
				p.mu.Lock()
				open := p.open
				p.mu.Unlock()
				select {
				case <-open:
				case <-p.closing:
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Pause holds back everything the broker sends until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.open = make(chan struct{})
	p.mu.Unlock()
}

// Resume lets what the broker sends flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
	p.mu.Unlock()
}

// Cut closes every connection through the proxy, as a network failure
// would; new connections are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Connections returns how many connections the proxy accepted.
func (p *Proxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops the proxy: connections are cut and new ones refused.
func (p *Proxy) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.closing)
		p.mu.Unlock()
		_ = p.ln.Close()
		p.Cut()
		p.wg.Wait()
	})
}
