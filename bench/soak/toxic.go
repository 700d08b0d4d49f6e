package main

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// A front is a TCP forwarder put before the connectortest.Proxy: it runs
// the faults the Proxy does not export (latency with jitter, a bandwidth
// limit, a silent half-open link) on the bytes of every connection; the
// Proxy behind it cuts (reset_peer) and holds (partition).
type front struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	mode   string // "", faultLatency, faultBandwidth
	conns  map[*frontConn]struct{}
	closed bool
	rng    *rand.Rand
}

type frontConn struct {
	a, b   net.Conn
	silent chan struct{} // closed when the link goes silent
	once   sync.Once
}

func newFront(target string, seed uint64) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, target: target, conns: map[*frontConn]struct{}{}, rng: rand.New(rand.NewPCG(seed, 7))}
	f.wg.Go(f.accept)
	return f, nil
}

func (f *front) Addr() string { return f.ln.Addr().String() }

// setMode applies latency or bandwidth to every connection ("" for none).
func (f *front) setMode(m string) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

// silence makes every open connection silent both ways: bytes are read
// and dropped, nothing is closed. It returns a func that closes them,
// the end of the fault (the stream lost bytes, so it cannot go on).
func (f *front) silence() (end func()) {
	f.mu.Lock()
	var cs []*frontConn
	for c := range f.conns {
		cs = append(cs, c)
		c.once.Do(func() { close(c.silent) })
	}
	f.mu.Unlock()
	return func() {
		for _, c := range cs {
			_ = c.a.Close()
			_ = c.b.Close()
		}
	}
}

func (f *front) Close() {
	f.mu.Lock()
	f.closed = true
	var cs []*frontConn
	for c := range f.conns {
		cs = append(cs, c)
	}
	f.mu.Unlock()
	_ = f.ln.Close()
	for _, c := range cs {
		_ = c.a.Close()
		_ = c.b.Close()
	}
	f.wg.Wait()
}

func (f *front) accept() {
	for {
		a, err := f.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.DialTimeout("tcp", f.target, 10*time.Second)
		if err != nil {
			_ = a.Close()
			continue
		}
		c := &frontConn{a: a, b: b, silent: make(chan struct{})}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = a.Close()
			_ = b.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		var both sync.WaitGroup
		both.Add(2)
		pump := func(dst, src net.Conn) {
			defer both.Done()
			f.pump(c, dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		f.wg.Go(func() { pump(b, a) })
		f.wg.Go(func() { pump(a, b) })
		f.wg.Go(func() {
			both.Wait()
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
		})
	}
}

// pump copies src to dst, delaying each chunk as the mode says.
func (f *front) pump(c *frontConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-c.silent:
				// A half-open link: the bytes go nowhere.
			default:
				f.mu.Lock()
				mode := f.mode
				var d time.Duration
				switch mode {
				case faultLatency:
					d = 40*time.Millisecond + time.Duration(f.rng.Int64N(int64(60*time.Millisecond))) - 30*time.Millisecond
				case faultBandwidth:
					d = time.Duration(n) * time.Second / (64 << 10)
				}
				f.mu.Unlock()
				if d > 0 {
					time.Sleep(d)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: the caller closes both
		}
	}
}
