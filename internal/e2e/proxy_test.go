package e2e_test

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A proxy forwards TCP connections to the broker and can cut them all, as
// a network failure would, which the real broker cannot be asked to do.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
	once  sync.Once
}

func newProxy(t *testing.T, brokerURL string) *proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: u.Host}
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
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { pipe(client, server) })
		p.wg.Go(func() { pipe(server, client) })
	}
}

func pipe(src, dst net.Conn) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every connection through the proxy; new ones are accepted.
func (p *proxy) cut() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns) / 2
}

func (p *proxy) close() {
	p.once.Do(func() {
		_ = p.ln.Close()
		p.cut()
		p.wg.Wait()
	})
}
