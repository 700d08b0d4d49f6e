package connectortest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/stretchr/testify/require"
)

// A Proxy forwards TCP connections to a broker and does to them what a
// real network does and a real broker cannot be asked to: it cuts them,
// holds back what the broker sends, and runs toxiproxy's toxics on them
// (latency with jitter, a bandwidth limit, a slicer, a reset, a link that
// goes silent, a partition). The fault mode of [Run] puts one between a
// connector and its broker; a connector's own tests and the soak
// (bench/soak) use one to apply faults of their choosing.
//
// A fault applies to the open connections and to those opened later,
// until another fault or [Proxy.Clear] replaces it: one fault at a time,
// one toxic on each direction of a connection. [Proxy.Latency], [Proxy.Bandwidth],
// [Proxy.Slicer], [Proxy.Silence], [Proxy.Reset] and [Proxy.Partition]
// act each way; [Proxy.Pause] on what the broker sends only; [Proxy.Cut]
// is no toxic but closes the open connections at once.
//
// Each direction of each connection runs through one toxiproxy toxic
// stub: the toxics are toxiproxy's own (but for Silence's and Reset's,
// which differ from them in how they treat a close, as their docs say),
// and a change of fault interrupts the running toxic, runs its cleanup as
// toxiproxy does when a toxic is removed, and starts the next one on the
// same stub, so that no byte in flight is lost unless the fault drops it.
// The proxy takes toxiproxy's toxics package alone, not its server, whose
// metrics would bring a Prometheus client into every connector module's
// graph.
//
// A close passes through the proxy behind the bytes before it, as a FIN
// does: when one side closes (or half-closes with
// [net.TCPConn.CloseWrite]), the proxy half-closes the other side's
// connection once it wrote what came before, while the other direction
// still flows; the connection ends once both sides closed. A fault that
// holds bytes holds a close behind them; one that ends a connection
// (Reset, Cut, Clear after Silence) closes both sides at once.
//
// Where the proxy differs from a network: a write that fails one way (the
// peer is gone) ends the whole connection at once, so bytes the other way
// that were held (Partition, Pause) or in flight (Latency) and not yet
// written are dropped, and that side sees a FIN, not a reset; a network
// would deliver them first. A Reset that fires while its direction's
// writer is blocked on a peer that reads nothing resets the sockets only
// once that write ends. Cut cuts the connections the proxy has accepted
// (including one whose dial to the broker is under way), not one still
// in the listener's queue.
//
// A Proxy is safe for use by several goroutines. Every goroutine of a
// Proxy has ended when Close returns.
type Proxy struct {
	ln       net.Listener
	target   string
	stopDial context.CancelFunc // ends a dial to the broker under way: Close waits for none
	wg       sync.WaitGroup     // the accept loop and every connection's goroutines

	// change serialises changes of the toxics: a stub is interrupted by
	// one change at a time.
	change sync.Mutex

	mu       sync.Mutex
	closed   bool
	links    map[*link]struct{}
	accepted int
	cuts     int // the number of Cuts so far
	// acceptFailed, when set (by a test), is called after each failed
	// Accept, under mu.
	acceptFailed func(error)
	dialing      int // connections accepted whose dial to the broker is under way
	// carried holds, in order, the number (1 for the first accepted) of
	// each connection that carried bytes both ways through the proxy: a
	// connection reset at its first byte never carried a delivery or a
	// write.
	carried []int
	// received counts the bytes the proxy read from the clients (0) and
	// from the broker (1), on every connection: what the toxics of each
	// direction were given.
	received [2]atomic.Int64
	// fresh is what a connection opened from now on runs through, up
	// (client to broker) and down (broker to client); nil passes bytes
	// unchanged.
	fresh [2]toxics.Toxic
}

// NewProxy starts a proxy to addr, a host:port, on a port of 127.0.0.1
// of its own. It closes when t ends.
func NewProxy(t testing.TB, addr string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "connectortest: proxy listen")
	ctx, stopDial := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: addr, stopDial: stopDial, links: map[*link]struct{}{}}
	p.wg.Go(func() { p.accept(ctx) })
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, which a client dials instead of the
// broker's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns brokerURL with the proxy's host:port in place of its own.
func (p *Proxy) URL(brokerURL string) string {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return brokerURL
	}
	u.Host = p.Addr()
	return u.String()
}

// Connections returns how many connections the proxy accepted.
func (p *Proxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// bytesIn returns how many bytes the proxy has read from the clients
// (up) and from the broker (down), on every connection so far.
func (p *Proxy) bytesIn() (up, down int64) {
	return p.received[0].Load(), p.received[1].Load()
}

// carriedSince returns how many of the connections accepted after the
// first n carried bytes both ways.
func (p *Proxy) carriedSince(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	for _, seq := range p.carried {
		if seq > n {
			k++
		}
	}
	return k
}

// Cut closes every connection the proxy has accepted, as a network failure would; new
// connections are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cuts++
	p.mu.Unlock()
	for _, l := range p.open() {
		l.teardown()
	}
}

// Pause holds back everything the broker sends, and its close, on the
// open connections and on those opened later, until Resume or Clear: a
// broker gone silent, whose bytes are late but not lost. What the client
// sends passes.
func (p *Proxy) Pause() { p.set(nil, holdToxic{}, true, true) }

// Resume lifts Pause, as Clear does: what the broker sent flows again,
// what was held first, and then the broker's close if it closed.
func (p *Proxy) Resume() { p.Clear() }

// Latency delays every chunk each way by d, give or take up to jitter
// (toxiproxy's latency toxic; both in whole milliseconds, as toxiproxy
// takes them): a round trip takes about 2×d more.
func (p *Proxy) Latency(d, jitter time.Duration) {
	p.both(&toxics.LatencyToxic{Latency: d.Milliseconds(), Jitter: jitter.Milliseconds()})
}

// Bandwidth limits each direction of each connection to kbPerSec
// kilobytes (1000 bytes) a second (toxiproxy's bandwidth toxic). A
// kbPerSec of 0 or less sets no limit: it is Clear (toxiproxy's toxic
// would pass nothing at 0 and panic below it).
func (p *Proxy) Bandwidth(kbPerSec int64) {
	if kbPerSec <= 0 {
		p.Clear()
		return
	}
	p.both(&toxics.BandwidthToxic{Rate: kbPerSec})
}

// Slicer cuts every chunk each way into pieces of averageSize bytes,
// give or take sizeVariation, delay apart (toxiproxy's slicer toxic; delay
// in whole microseconds): a peer reads its frames a few bytes at a time.
// It panics unless 0 <= sizeVariation < averageSize, as toxiproxy's
// slicer would recurse without end.
func (p *Proxy) Slicer(averageSize, sizeVariation int, delay time.Duration) {
	if sizeVariation < 0 || sizeVariation >= averageSize {
		panic("sluice: connectortest: Proxy.Slicer needs 0 <= sizeVariation < averageSize")
	}
	p.both(&toxics.SlicerToxic{AverageSize: averageSize, SizeVariation: sizeVariation, Delay: int(delay.Microseconds())})
}

// Silence makes every connection a half-open link (toxiproxy's timeout
// toxic with a timeout of 0): what either side sends is dropped, and
// nothing is closed, so that only a heartbeat notices. A side that closes
// is not heard either (toxiproxy's toxic would pass its close on). New
// connections are accepted and as silent. Clear, or the next fault,
// closes the connections it silenced, since their streams lost bytes, as
// toxiproxy does when a timeout toxic is removed.
func (p *Proxy) Silence() { p.both(&toxics.TimeoutToxic{}) }

// Reset resets every connection (toxiproxy's reset_peer toxic with a
// timeout of 0): a connection is closed with an RST, not a FIN, at its
// next byte (or close) either way; an idle one once it next carries a
// byte, and a new one at its first. A connection that carried no byte
// while the Reset lasted is not reset: once the fault is lifted, its
// closes are FINs again, and lose no byte on the way.
func (p *Proxy) Reset() { p.both(&toxics.ResetToxic{}) }

// Partition lets nothing pass either way, on every connection, and holds
// what is sent (up to about a megabyte each way, then the sender waits, as
// a full TCP window would make it) and a close behind it; Clear delivers
// what was held, in order, and then the close, as TCP would retransmit
// them once the network heals.
func (p *Proxy) Partition() { p.both(holdToxic{}) }

// Clear lifts the fault, on the open connections and on those opened
// later: held bytes are delivered (and then a held close), and the
// connections a Silence silenced are closed (the toxic's cleanup, as
// toxiproxy runs it when a toxic is removed). A connection a Reset reset
// stays closed.
func (p *Proxy) Clear() { p.set(nil, nil, true, true) }

// both runs toxic each way, on the open connections and those opened
// from now on.
func (p *Proxy) both(toxic toxics.Toxic) { p.set(toxic, toxic, true, true) }

// Close stops the proxy: the open connections are closed, new ones
// refused, and every goroutine of the proxy has ended when it returns.
// It interrupts the running toxics and cancels a dial to the broker under
// way rather than wait out their pace (an hour of latency, say, or the
// dial's 10 s timeout).
func (p *Proxy) Close() {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if !already {
		_ = p.ln.Close()
		p.stopDial()
		p.Cut()
	}
	p.wg.Wait()
}

// set runs up and down (nil: no toxic) on the open connections when open
// is true, and on the connections opened from now on when fresh is true.
func (p *Proxy) set(up, down toxics.Toxic, open, fresh bool) {
	p.change.Lock()
	defer p.change.Unlock()
	p.mu.Lock()
	if fresh {
		p.fresh = [2]toxics.Toxic{up, down}
	}
	p.mu.Unlock()
	if !open {
		return
	}
	for _, l := range p.open() {
		l.set(up, down)
	}
}

// open returns the open connections.
func (p *Proxy) open() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

func (p *Proxy) accept(ctx context.Context) {
	d := net.Dialer{Timeout: 10 * time.Second}
	for {
		client, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors, or a connection aborted before it was
			// taken: the next Accept may succeed, so the proxy keeps
			// serving, after a pause that keeps the loop from spinning.
			p.mu.Lock()
			if p.acceptFailed != nil {
				p.acceptFailed(err)
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		cuts := p.cuts
		p.dialing++
		p.mu.Unlock()
		server, err := d.DialContext(ctx, "tcp", p.target)
		p.mu.Lock()
		p.dialing--
		p.mu.Unlock()
		if err != nil {
			_ = client.Close()
			continue
		}
		// Under p.mu alone, not p.change: a change of toxics that is
		// slow to take effect never holds up a new connection. A change
		// that sets p.fresh before this reads it lists this link too, and
		// finds its toxics already in place.
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		if p.cuts != cuts {
			// Cut while this connection's dial was under way: it was
			// open for the client before the Cut, so it is cut too.
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.accepted++
		l := &link{p: p, seq: p.accepted, client: client, server: server, dead: make(chan struct{})}
		p.links[l] = struct{}{}
		// l.mu until both stubs are in place: a goroutine of the link that
		// tears it down at once stops them.
		l.mu.Lock()
		l.cur = p.fresh
		l.up = l.start(0, client, server, l.cur[0])
		l.down = l.start(1, server, client, l.cur[1])
		l.mu.Unlock()
		p.mu.Unlock()
	}
}

// A link is one connection through the proxy: the client's side, the
// broker's, and a toxic stub each way.
type link struct {
	p              *Proxy
	seq            int // the proxy's count of connections when it was accepted
	client, server net.Conn
	wrote          [2]atomic.Bool // a byte was written to the broker, to the client
	// eof records that the client (up) or the broker (down) closed its
	// side in order: its reader read to io.EOF.
	eof [2]atomic.Bool
	// halves counts the directions whose end was forwarded as a
	// half-close; at two the link is done.
	halves atomic.Int32
	// reset records that a reset fired: the link ends with an RST.
	reset atomic.Bool

	// mu is held while a stub's toxic is replaced or stopped, so that one
	// goroutine at a time interrupts a stub.
	mu       sync.Mutex
	up, down *toxics.ToxicStub
	cur      [2]toxics.Toxic // what up and down run
	stopped  bool            // teardown stopped the toxics: none runs again

	once sync.Once
	dead chan struct{} // closed by teardown
}

// linkBudget is how many bytes of one direction of a link may be on their
// way through the proxy (read from one side, not yet written to the
// other): the reader waits for room beyond it, so that a peer that reads
// nothing holds back the other, as a network would.
const linkBudget = 1 << 20

// start runs the bytes from src to dst, the direction dir (0 up, 1
// down), through a stub running toxic:
// a reader turns src's bytes into chunks, the stub passes them through
// the toxic, a forwarder takes what the toxic sends at once and a writer
// writes it to dst. The toxic never waits for dst: a change of toxics,
// which waits for the running toxic to stop, never waits for a peer that
// reads nothing (toxiproxy's toxics send their output without watching
// for the interruption). The reader waits instead, once linkBudget bytes
// are on their way.
func (l *link) start(dir int, src, dst net.Conn, toxic toxics.Toxic) *toxics.ToxicStub {
	in := make(chan *stream.StreamChunk, 32)
	out := make(chan *stream.StreamChunk)
	stub := toxics.NewToxicStub(in, out)
	room := newBudget(linkBudget)
	l.p.wg.Go(func() {
		defer close(in)
		buf := make([]byte, 32<<10)
		for {
			if !room.take(len(buf), l.dead) {
				return
			}
			n, err := src.Read(buf)
			room.give(len(buf) - n)
			if n > 0 {
				l.p.received[dir].Add(int64(n))
				c := &stream.StreamChunk{Data: append([]byte(nil), buf[:n]...), Timestamp: time.Now()}
				select {
				case in <- c:
				case <-l.dead:
					return
				}
			}
			if err != nil {
				// Before in closes: the writer learns of it once the
				// toxic has passed the close on.
				l.eof[dir].Store(errors.Is(err, io.EOF))
				return
			}
		}
	})
	l.run(stub, toxic)
	q := &chunkQueue{ready: make(chan struct{}, 1)}
	l.p.wg.Go(func() {
		for c := range out {
			q.push(c)
		}
		q.finish()
	})
	l.p.wg.Go(func() {
		for {
			c, ok := q.pop(l.dead)
			if !ok {
				break
			}
			if _, err := dst.Write(c.Data); err != nil {
				// What the stub passes from now on has nowhere to go:
				// the forwarder goes on taking it until teardown stops
				// the toxic.
				l.teardown()
				return
			}
			room.give(len(c.Data))
			l.wrote1(dir)
		}
		l.end(dir, dst)
	})
	return stub
}

// end ends the direction dir, to dst, once its toxic closed its output
// and the writer wrote everything in it. A source that closed its side in
// order, whose close a toxic passed on, closes dst's side in turn (a
// half-close, after the bytes before it), and the link is done once both
// directions did; anything else (a reset, an error, a toxic's cleanup)
// tears the link down.
func (l *link) end(dir int, dst net.Conn) {
	select {
	case <-l.dead:
		return
	default:
	}
	tc, ok := dst.(*net.TCPConn)
	if l.reset.Load() || !l.eof[dir].Load() || !ok || tc.CloseWrite() != nil {
		l.teardown()
		return
	}
	if l.halves.Add(1) == 2 {
		l.teardown()
	}
}

// A budget is a count of bytes that one reader takes before it reads and
// others give back once they wrote (or the reader read less).
type budget struct {
	mu   sync.Mutex
	free int
	max  int
	wake chan struct{} // buffered 1: bytes were given back
}

func newBudget(n int) *budget { return &budget{free: n, max: n, wake: make(chan struct{}, 1)} }

// take waits until n bytes are free (or nothing is on the way: a chunk
// larger than the budget still passes) and takes them; false if dead is
// closed first.
func (b *budget) take(n int, dead <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.free >= n || b.free == b.max {
			b.free -= n
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-dead:
			return false
		}
	}
}

// give gives n bytes back.
func (b *budget) give(n int) {
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// A chunkQueue holds what a toxic sent until the writer writes it: it
// takes every chunk at once, and the reader's budget bounds it.
type chunkQueue struct {
	mu    sync.Mutex
	q     []*stream.StreamChunk
	done  bool          // the toxic's output is closed
	ready chan struct{} // buffered 1: a chunk was pushed, or done
}

func (q *chunkQueue) push(c *stream.StreamChunk) {
	q.mu.Lock()
	q.q = append(q.q, c)
	q.mu.Unlock()
	q.signal()
}

func (q *chunkQueue) finish() {
	q.mu.Lock()
	q.done = true
	q.mu.Unlock()
	q.signal()
}

func (q *chunkQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop returns the next chunk, waiting for one; false once the output is
// closed and everything in it was taken, or dead is closed.
func (q *chunkQueue) pop(dead <-chan struct{}) (*stream.StreamChunk, bool) {
	for {
		q.mu.Lock()
		if len(q.q) > 0 {
			c := q.q[0]
			q.q[0] = nil
			q.q = q.q[1:]
			q.mu.Unlock()
			return c, true
		}
		done := q.done
		q.mu.Unlock()
		if done {
			return nil, false
		}
		select {
		case <-q.ready:
		case <-dead:
			return nil, false
		}
	}
}

// run runs toxic on stub (a no-op one for nil) in a goroutine of the
// proxy. toxiproxy's reset_peer toxic runs as resetToxic, which makes the
// link's close an RST when it fires, and its timeout toxic with a
// timeout of 0 as silenceToxic, which holds a close back too.
func (l *link) run(stub *toxics.ToxicStub, toxic toxics.Toxic) {
	switch t := toxic.(type) {
	case nil:
		toxic = new(toxics.NoopToxic)
	case *toxics.ResetToxic:
		toxic = resetToxic{l: l, after: time.Duration(t.Timeout) * time.Millisecond}
	case *toxics.TimeoutToxic:
		if t.Timeout == 0 {
			toxic = silenceToxic{}
		}
	}
	if st, ok := toxic.(toxics.StatefulToxic); ok {
		stub.State = st.NewState()
	}
	w := &toxics.ToxicWrapper{Toxic: toxic, Toxicity: 1}
	l.p.wg.Go(func() { stub.Run(w) })
}

// set replaces the toxics of the link's two stubs, each only if it
// changes.
func (l *link) set(up, down toxics.Toxic) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.replace(l.up, l.cur[0], up)
	l.replace(l.down, l.cur[1], down)
	l.cur = [2]toxics.Toxic{up, down}
}

// stop interrupts the toxics of the link's two stubs, without waiting
// out the pace of any, runs none again, and closes the stubs, so that
// their forwarders end.
func (l *link) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	for _, stub := range []*toxics.ToxicStub{l.up, l.down} {
		if stub.InterruptToxic() {
			stub.Close()
		}
	}
}

// replace removes old from stub and runs next on it, as toxiproxy removes
// a toxic from a link (under l.mu): it interrupts old, runs old's cleanup if it has one
// (a timeout toxic's closes the stub, and so the connection), and runs
// next unless the stub is closed; a stub already closed keeps none.
func (l *link) replace(stub *toxics.ToxicStub, old, next toxics.Toxic) {
	if old == next || !stub.InterruptToxic() {
		return
	}
	if c, ok := old.(toxics.CleanupToxic); ok {
		c.Cleanup(stub)
	}
	if stub.Closed() { // by the cleanup, or by a reset that fired as it was interrupted
		return
	}
	l.run(stub, next)
}

// wrote1 records that a byte went to the broker (dir 0) or the client
// (1), and the connection among those that carried bytes both ways once
// both did.
func (l *link) wrote1(dir int) {
	if l.wrote[dir].Swap(true) || !l.wrote[1-dir].Load() {
		return
	}
	l.p.mu.Lock()
	l.p.carried = append(l.p.carried, l.seq)
	l.p.mu.Unlock()
}

// abort makes the link's close an RST, not a FIN, and its end a
// teardown: a reset fired.
func (l *link) abort() {
	l.reset.Store(true)
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
}

// teardown closes both sides of the connection and stops its toxics,
// once, and forgets it.
func (l *link) teardown() {
	l.once.Do(func() {
		close(l.dead)
		_ = l.client.Close()
		_ = l.server.Close()
		l.stop()
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// holdToxic holds every chunk, and the close of its input, until it is
// interrupted, and then passes the chunks on, in order, and leaves the
// close to the next toxic: a peer whose bytes and close are late, not
// lost.
type holdToxic struct{}

func (holdToxic) Pipe(stub *toxics.ToxicStub) {
	var held []*stream.StreamChunk
	in := stub.Input
	for {
		select {
		case <-stub.Interrupt:
			for _, c := range held {
				stub.Output <- c
			}
			return
		case c := <-in:
			if c == nil { // the source closed: read no more
				in = nil
				continue
			}
			held = append(held, c)
		}
	}
}

// silenceToxic is toxiproxy's timeout toxic with a timeout of 0, which
// drops every chunk, except that the close of its input is held back too
// (toxiproxy's passes it on): a silent link passes nothing, not even a
// close. Its removal closes the stub all the same: replace runs the
// timeout toxic's cleanup.
type silenceToxic struct{}

func (silenceToxic) Pipe(stub *toxics.ToxicStub) {
	in := stub.Input
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-in:
			if c == nil { // the source closed: read no more
				in = nil
			}
		}
	}
}

// resetToxic is toxiproxy's reset_peer toxic, bound to its link: at the
// first chunk (or the close of its input), after the toxic's timeout, it
// makes the link's close an RST and closes the stub. The RST is set as
// the reset fires, not when the toxic is set: a reset lifted before it
// fired leaves the link's closes orderly. Unlike toxiproxy's, an
// interruption cuts its timeout short: it fires at once, since it
// dropped a chunk.
type resetToxic struct {
	l     *link
	after time.Duration
}

func (t resetToxic) Pipe(stub *toxics.ToxicStub) {
	select {
	case <-stub.Interrupt:
		return
	case <-stub.Input:
	}
	if t.after > 0 {
		select {
		case <-stub.Interrupt:
		case <-time.After(t.after):
		}
	}
	t.l.abort()
	stub.Close()
}

// toxiproxy's bandwidth toxic logs each interruption at the trace level
// through zerolog's global logger, which writes to stderr: the suite's
// proxies would fill a test's output with it. Nothing else in a test of
// the suite logs through that logger.
func init() { log.Logger = zerolog.Nop() }
