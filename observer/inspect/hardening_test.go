package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A page that stops reading (a frozen tab, a laptop lid closed, a network
// that drops packets without a reset) leaves its stream's handler blocked
// in a write: Close ends that write (and WithWriteTimeout bounds it), so
// the handler returns and http.Server.Shutdown after Close does not wait.
func TestCloseEndsAStuckStream(t *testing.T) {
	in, returned, open := stuckPage(t)
	open()
	// The client reads nothing from here on.
	for in.Watchers() == 0 {
		runtime.Gosched()
	}
	in.Close()
	waitReturned(t, in, returned)
}

// A page that comes after Close gets one snapshot under Close's grace,
// not the write timeout: one that reads nothing does not hold its handler
// for the hour. (A page counted among the watchers just before Close that
// looked at Close just after it was held so, which made the test above
// fail now and then on a busy machine.)
func TestCloseEndsAStreamStartedAfterClose(t *testing.T) {
	in, returned, open := stuckPage(t)
	in.Close()
	open()
	waitReturned(t, in, returned)
}

// stuckPage returns an Inspector whose snapshot is larger than the
// loopback socket buffers, with a write timeout of an hour (only Close
// can end a write in time), a channel closed when its event stream's
// handler returned, and open, which requests the stream from a client
// that then reads nothing.
func stuckPage(t *testing.T) (in *inspect.Inspector, returned chan struct{}, open func()) {
	t.Helper()
	in = inspect.New(inspect.WithClock(clockwork.NewFakeClock()), inspect.WithWriteTimeout(time.Hour))
	// Twenty big reasons make one snapshot larger than the loopback
	// socket buffers, so the first write already blocks.
	sink := in.DeadLetterSink(deadletter.Func(func(context.Context, deadletter.Envelope) error { return nil }))
	big := strings.Repeat("x", 1<<20)
	for i := range 20 {
		require.NoError(t, sink.Write(context.Background(), deadletter.Envelope{ErrText: fmt.Sprint(i, big)}))
	}
	returned = make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.ServeHTTP(w, r)
		if r.URL.Path == "/api/events" {
			close(returned)
		}
	}))
	open = func() {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() {
			conn.Close()
			srv.Close()
		})
		_, err = fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		require.NoError(t, err)
	}
	return in, returned, open
}

// waitReturned fails t unless the event stream's handler returns within
// a minute of Close. Close gives the write a second; the handler first
// marshals a 20 MB snapshot, which takes seconds under -race on a busy
// machine, so the bound is generous: what fails is a handler held by the
// hour's write timeout.
func waitReturned(t *testing.T, in *inspect.Inspector, returned chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-returned:
	case <-ctx.Done():
		t.Errorf("the stream's handler is still blocked a minute after Close (Watchers %d): a stuck page holds it", in.Watchers())
	}
}

// fakeBroker is a broker source's dead-letter sink: it gives every item
// back to its broker.
type fakeBroker struct {
	stored, retried atomic.Int32
}

func (b *fakeBroker) Write(context.Context, deadletter.Envelope) error {
	b.stored.Add(1)
	return nil
}

func (b *fakeBroker) WriteOrRetry(context.Context, deadletter.Envelope) (bool, error) {
	b.retried.Add(1)
	return true, nil
}

// Wrapped by DeadLetterSink, a broker source's sink (a BrokerRetrier)
// keeps its WriteOrRetry: the items its broker delivers again are broker
// retries, not dead letters, as without the Inspector.
func TestDeadLetterSinkKeepsBrokerRetrier(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		t.Run(fmt.Sprint("wrap=", wrap), func(t *testing.T) {
			in := inspect.New()
			broker := &fakeBroker{}
			var sink deadletter.Sink = broker
			if wrap {
				sink = in.DeadLetterSink(broker)
			}
			b := pipeline.New("orders", pipeline.WithObserver(in), pipeline.WithDeadLetter(sink),
				pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
			src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
			checked := pipeline.Map(b, "check", src, func(_ context.Context, x int) (int, error) {
				if x == 2 {
					return 0, errBad
				}
				return x, nil
			})
			pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
			p, err := b.Build()
			require.NoError(t, err)
			res, err := p.Run(context.Background())
			require.NoError(t, err)
			n, _ := res.Node("check")
			assert.Equal(t, int32(1), broker.retried.Load(), "the item goes back to its broker")
			assert.Equal(t, int32(0), broker.stored.Load(), "and is not stored as a dead letter")
			assert.Equal(t, int64(1), n.BrokerRetries)
			assert.Equal(t, int64(0), n.DeadLettered)
		})
	}
}

// gateInts emits one int per value sent, and ends when the channel closes
// or its context is done.
type gateInts chan int

func (g gateInts) Run(ctx context.Context, out node.Emitter[int]) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case x, ok := <-g:
			if !ok {
				return nil
			}
			if err := out.Emit(ctx, x); err != nil {
				return err
			}
		}
	}
}

// "Parked" is the item retries announced minus those Stats counts as made,
// less those abandoned before the node's run started: a parked retry
// never made (the run was cancelled while the item waited) does not show
// as parked in the next run of the same pipeline.
func TestParkedLeavesOutAbandonedRetries(t *testing.T) {
	clock := clockwork.NewFakeClock()
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	sig := retried{ch: make(chan struct{}, 1)}
	b := pipeline.New("orders", pipeline.WithClock(clock), pipeline.WithObserver(observer.Multi(in, sig)))
	var calls atomic.Int32
	g := make(gateInts)
	src := pipeline.Source(b, "read", g)
	checked := pipeline.Map(b, "check", src, func(_ context.Context, x int) (int, error) {
		if x == 2 && calls.Add(1) == 1 {
			return 0, resilience.MarkTransient(errors.New("busy"))
		}
		return x, nil
	}, pipeline.Parallel(2), pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.Constant(time.Hour)
	}))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	srv := newServer(t, in)

	// Run 1: item 2 parks for an hour; the run is cancelled meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	run := pipelinetest.Start(ctx, p)
	g <- 2
	<-sig.ch
	cancel()
	_, err = run.Wait()
	require.Error(t, err)

	// Run 2: nothing fails, nothing parks.
	g2 := g
	run = pipelinetest.Start(context.Background(), p)
	g2 <- 1
	var sn struct {
		Running bool
		Nodes   []struct {
			Name   string
			Parked int64
		}
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/snapshot", &sn))
	require.True(t, sn.Running)
	assert.Equal(t, "check", sn.Nodes[1].Name)
	assert.Equal(t, int64(0), sn.Nodes[1].Parked, "no retry waits in this run")
	close(g)
	_, err = run.Wait()
	require.NoError(t, err)
}

// A snapshot's cost does not grow with the reasons: reasons that name the
// item ("order 123: ...") are one group per dead letter, and the Inspector
// counts at most WithMaxReasons of them apart (the rest in one Other
// group), so one snapshot of 20 groups of 100,000 such dead letters
// allocates little.
func TestSnapshotCostBoundedByReasons(t *testing.T) {
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	const n = 100_000
	for i := range n {
		in.OnDeadLetter(observer.DeadLetterEvent{Event: observer.Event{Node: "check"}, Key: fmt.Sprint(i),
			Err: fmt.Errorf("order %d: no such customer", i)})
	}
	srv := newServer(t, in)
	getBody(t, srv.URL+"/api/snapshot") // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	getBody(t, srv.URL+"/api/snapshot")
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	assert.True(t, alloc < 512<<10, "one snapshot of 20 groups allocated %d bytes", alloc)
}

// A HEAD of the event stream (a monitor probing the URLs, curl -I) gets
// its headers and no stream: the Go client, which reuses the connection
// after a HEAD, gets its next answer, and the handler has returned.
func TestHeadOfEventsAnswersAtOnce(t *testing.T) {
	in := inspect.New(inspect.WithInterval(10 * time.Millisecond))
	returned := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.ServeHTTP(w, r)
		if r.URL.Path == "/api/events" {
			close(returned)
		}
	}))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	resp, err := client.Head(srv.URL + "/api/events")
	require.NoError(t, err)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/graph", nil)
	require.NoError(t, err)
	resp, err = client.Do(req)
	if assert.NoError(t, err, "the next request on the connection (Watchers %d)", in.Watchers()) {
		resp.Body.Close()
	}
	// The client gives up and closes its connections.
	client.CloseIdleConnections()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Errorf("the HEAD's handler still runs 5 s after its client left (Watchers %d)", in.Watchers())
	}
	in.Close()
	<-returned
	srv.Close()
}

// The pipeline never waits on a browser. OnDeadLetter (called on the
// worker that dead-letters the item) and DeadLetterSink's sink take a lock
// that the page's readers hold only to copy a few slice headers and
// counts: with 100,000 reasons that name their item, a client paging the
// list in a loop does not hold up the pipeline's dead-letter path.
func TestPagingNeverStallsDeadLetterPath(t *testing.T) {
	const n = 100_000
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()), inspect.WithMaxDeadLetters(n))
	for i := range n {
		in.OnDeadLetter(observer.DeadLetterEvent{Event: observer.Event{Node: "check"}, Key: fmt.Sprint(i),
			Err: fmt.Errorf("order %d: no such customer", i)})
	}
	srv := newServer(t, in)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	stop := make(chan struct{})
	done := make(chan struct{})
	var pages atomic.Int32
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				resp, err := client.Get(srv.URL + "/api/deadletters")
				if err == nil {
					resp.Body.Close()
					pages.Add(1)
				}
			}
		}
	}()
	took := make([]time.Duration, 0, 1<<20)
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		s := time.Now()
		in.OnDeadLetter(observer.DeadLetterEvent{Event: observer.Event{Node: "check"}, Err: errBad})
		took = append(took, time.Since(s))
	}
	close(stop)
	<-done
	require.True(t, pages.Load() > 0, "the page was read meanwhile")
	slices.Sort(took)
	p99, worst := took[len(took)*99/100], took[len(took)-1]
	// Waiting on the page's lock, each call waited for a page sorting
	// 100,000 reasons (100-150 ms): about 100 calls in 2 s. The worst
	// call's wall time alone says little on a loaded two-core machine,
	// where preemption and the race detector's GC stop a no-op loop step
	// for up to 180 ms: the calls made and their 99th percentile do.
	assert.True(t, len(took) >= 10_000, "%d calls of OnDeadLetter in 1 s while a page was read %d times", len(took), pages.Load())
	assert.True(t, p99 < time.Millisecond, "the pipeline's OnDeadLetter waited %v (99th percentile; worst %v) while a page was read %d times",
		p99, worst, pages.Load())
}

// With AllowDrain the page's own script sends the control header, so the
// header stops another site's form but not another site that frames the
// page and gets the user to click Drain (clickjacking): the page forbids
// framing (X-Frame-Options and the CSP's frame-ancestors).
func TestPageCannotBeFramed(t *testing.T) {
	in := inspect.New(inspect.AllowDrain())
	srv := newServer(t, in)
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	framing := resp.Header.Get("X-Frame-Options") != "" ||
		strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors")
	assert.True(t, framing, "the page with a Drain button may be framed by any site")
}

// A site the user visits can rebind its name to 127.0.0.1, where the
// docs advise the page to listen: the handler refuses a Host that is not
// an IP address, localhost or a name AllowHosts lists, so the site reads
// no dead letters' keys and reasons.
func TestOtherHostsRefused(t *testing.T) {
	in := inspect.New()
	in.OnDeadLetter(observer.DeadLetterEvent{Key: "customer-42@example.com", Err: errBad})
	srv := newServer(t, in)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/deadletters", nil)
	require.NoError(t, err)
	req.Host = "attacker.example:9465"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.NotEqual(t, http.StatusOK, resp.StatusCode, "a request for another host name gets the dead letters")
}

// The hosts answered: IP literals, localhost and the names AllowHosts
// lists, with or without port and in any case; others get 421.
func TestAllowHosts(t *testing.T) {
	in := inspect.New(inspect.AllowHosts("Inspector.LAN"))
	srv := newServer(t, in)
	for host, want := range map[string]int{
		"127.0.0.1": http.StatusOK, "127.0.0.1:9465": http.StatusOK, "[::1]:9465": http.StatusOK,
		"localhost:1": http.StatusOK, "LOCALHOST": http.StatusOK, "app.localhost": http.StatusOK,
		"inspector.lan:80": http.StatusOK, "inspector.lan.": http.StatusOK,
		"inspector.lan.example": http.StatusMisdirectedRequest, "localhost.example": http.StatusMisdirectedRequest,
		"attacker.example": http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/graph", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, host)
	}
	for _, bad := range []string{"", "host:80", "a/b"} {
		assert.Panics(t, func() { inspect.New(inspect.AllowHosts(bad)) }, bad)
	}
}

// Every answer carries the strict policy: the page loads only its own
// files and may not be framed.
func TestStrictContentPolicy(t *testing.T) {
	srv := newServer(t, inspect.New())
	for _, path := range []string{"/", "/app.js", "/api/snapshot", "/api/deadletters"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		assert.True(t, strings.Contains(csp, "default-src 'self'") && strings.Contains(csp, "frame-ancestors 'none'"), "%s: %q", path, csp)
		assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
	}
}

// Past WithMaxReasons distinct reasons, the dead letters of new reasons
// are listed in one Other group, which the list filters with other=1.
func TestReasonsPastTheCapGoToOther(t *testing.T) {
	in := inspect.New(inspect.WithMaxReasons(2))
	for i := range 5 {
		in.OnDeadLetter(observer.DeadLetterEvent{Key: fmt.Sprint(i), Err: fmt.Errorf("reason %c", 'a'+i%4)})
	}
	srv := newServer(t, in)
	var page struct {
		Total  int
		Groups []struct {
			Reason string
			Count  int
			Other  bool
		}
		Reasons     int
		DeadLetters []struct{ Key, Reason string }
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters", &page))
	assert.Equal(t, 5, page.Total)
	assert.Equal(t, 3, page.Reasons, "two reasons and the other group")
	require.Len(t, page.Groups, 3)
	assert.Equal(t, "reason a", page.Groups[0].Reason)
	assert.Equal(t, 2, page.Groups[0].Count)
	assert.True(t, page.Groups[1].Other, "the other group, 2 dead letters, before a reason of 1")
	assert.Equal(t, 2, page.Groups[1].Count)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?other=1", &page))
	assert.Equal(t, 2, page.Total)
	require.Len(t, page.DeadLetters, 2)
	assert.Equal(t, "reason c", page.DeadLetters[0].Reason)
	assert.Equal(t, "reason d", page.DeadLetters[1].Reason)
	assert.Panics(t, func() { inspect.New(inspect.WithMaxReasons(0)) })
}

// noFlush hides its writer's Flusher, as a middleware without Unwrap does.
type noFlush struct{ w http.ResponseWriter }

func (n noFlush) Header() http.Header         { return n.w.Header() }
func (n noFlush) Write(b []byte) (int, error) { return n.w.Write(b) }
func (n noFlush) WriteHeader(code int)        { n.w.WriteHeader(code) }

// unwrapping hides it too, but unwraps to it.
type unwrapping struct{ noFlush }

func (u unwrapping) Unwrap() http.ResponseWriter { return u.w }

// Behind a middleware that hides the Flusher the stream cannot be one:
// it answers 501 with the reason at once, instead of a stream that never
// arrives; with Unwrap it streams.
func TestStreamNeedsAFlusher(t *testing.T) {
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	hidden := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { in.ServeHTTP(noFlush{w}, r) }))
	resp, err := http.Get(hidden.URL + "/api/events")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	assert.Contains(t, string(body), "Unwrap")
	unwrapped := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.ServeHTTP(unwrapping{noFlush{w}}, r)
	}))
	s := openStream(t, unwrapped.URL)
	s.next(t)
	assert.Equal(t, 1, in.Watchers())
	s.close()
}

// Without Close, a page that reads nothing is let go once a write waits
// past WithWriteTimeout: its handler returns and Watchers drops. The
// snapshots hold 20 reasons of about 190 bytes each (reasons are made
// short, so no one snapshot outgrows the sockets): the test moves the
// clock on until the snapshots fill what the sockets hold and a write
// waits.
func TestWriteTimeoutLetsAStuckPageGo(t *testing.T) {
	clock := clockwork.NewFakeClock()
	in := inspect.New(inspect.WithClock(clock), inspect.WithWriteTimeout(200*time.Millisecond))
	sink := in.DeadLetterSink(deadletter.Func(func(context.Context, deadletter.Envelope) error { return nil }))
	for i := range 20 {
		text := strings.Repeat(string(rune('a'+i)), 190)
		require.NoError(t, sink.Write(context.Background(), deadletter.Envelope{ErrText: text}))
	}
	returned := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.ServeHTTP(w, r)
		if r.URL.Path == "/api/events" {
			close(returned)
		}
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	// The page's receive buffer is set small, which stops the kernel
	// growing it (up to 32 MiB here).
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	guard := time.After(time.Minute)
	for ticks := 0; ; ticks++ {
		select {
		case <-returned:
			t.Logf("let go after %d ticks", ticks)
			assert.Equal(t, 0, in.Watchers())
			in.Close()
			return
		case <-guard:
			// A guard against a hang, not a wait: only the write
			// timeout ends the handler.
			t.Fatalf("the stream's handler is still blocked a minute into a 200 ms write timeout, after %d ticks (Watchers %d)", ticks, in.Watchers())
		default:
		}
		clock.Advance(inspect.DefaultInterval)
		runtime.Gosched()
	}
}

// Dead letters whose errors name their item group by one reason, the
// text made short as slogobserver.Reason does: before, each raw text made
// a group of its own (the demo's 139 letters, 126 groups), and past
// WithMaxReasons a reason shared by 500 later letters sat unnamed in the
// other group. Each letter keeps its own text; the group's page filters
// by the reason. An HTTP status stays apart.
func TestDeadLettersGroupByTheirReason(t *testing.T) {
	t.Parallel()
	in := inspect.New(inspect.WithMaxReasons(5))
	for i := range 20 {
		in.OnDeadLetter(observer.DeadLetterEvent{Key: fmt.Sprint(i),
			Err: fmt.Errorf("malformed row %q: amount: bad cents", fmt.Sprintf("ord-%07d,cust-1,12.5O,EUR", i))})
	}
	for i := range 30 {
		in.OnDeadLetter(observer.DeadLetterEvent{Key: fmt.Sprint(100 + i), Err: fmt.Errorf("order o-%d: %w", i, statusErr(503))})
	}
	in.OnDeadLetter(observer.DeadLetterEvent{Key: "400", Err: fmt.Errorf("order o-1: %w", statusErr(400))})
	srv := newServer(t, in)
	var page struct {
		Total  int
		Groups []struct {
			Reason string
			Count  int
			Other  bool
		}
		Reasons     int
		DeadLetters []struct{ Key, Reason string }
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters", &page))
	assert.Equal(t, 51, page.Total)
	assert.Equal(t, 3, page.Reasons)
	require.Len(t, page.Groups, 3)
	assert.Equal(t, "order #: HTTP 503", page.Groups[0].Reason)
	assert.Equal(t, 30, page.Groups[0].Count)
	assert.Equal(t, `malformed row "…": amount: bad cents`, page.Groups[1].Reason)
	assert.Equal(t, 20, page.Groups[1].Count)
	assert.Equal(t, "order #: HTTP 400", page.Groups[2].Reason)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?reason="+url.QueryEscape(`malformed row "…": amount: bad cents`)+"&limit=200", &page))
	assert.Equal(t, 20, page.Total)
	require.Len(t, page.DeadLetters, 20)
	assert.Equal(t, `malformed row "ord-0000007,cust-1,12.5O,EUR": amount: bad cents`, page.DeadLetters[7].Reason, "each letter keeps its text")
}

// statusErr is an error with an HTTP status, as the default classifier
// reads one.
type statusErr int

func (e statusErr) Error() string   { return fmt.Sprintf("HTTP %d", int(e)) }
func (e statusErr) StatusCode() int { return int(e) }
