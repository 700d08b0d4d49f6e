package rabbitmq_test

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A proxy forwards TCP connections to the broker, and can hold back what
// the broker sends (so that confirms are late) or cut every connection (so
// that a client loses it), which the real broker cannot be asked to do.
type proxy struct {
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

// newProxy starts a proxy to the broker of brokerURL; it stops with the
// test.
func newProxy(t *testing.T, brokerURL string) *proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: u.Host, open: make(chan struct{}), closing: make(chan struct{})}
	close(p.open)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// url returns brokerURL with the proxy's address.
func (p *proxy) url(brokerURL string) string {
	u, _ := url.Parse(brokerURL)
	u.Host = p.ln.Addr().String()
	return u.String()
}

func (p *proxy) accept() {
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
func (p *proxy) pipe(src, dst net.Conn, fromBroker bool) {
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

// pause holds back everything the broker sends until resume.
func (p *proxy) pause() {
	p.mu.Lock()
	p.open = make(chan struct{})
	p.mu.Unlock()
}

func (p *proxy) resume() {
	p.mu.Lock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
	p.mu.Unlock()
}

// cut closes every connection through the proxy, as a network failure
// would; new connections are still accepted.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// connections returns how many connections the proxy accepted.
func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// close stops the proxy: connections are cut and new ones refused.
func (p *proxy) close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.closing)
		p.mu.Unlock()
		_ = p.ln.Close()
		p.cut()
		p.wg.Wait()
	})
}
