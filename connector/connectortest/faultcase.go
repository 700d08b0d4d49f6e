package connectortest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// The fault mode's runs: faultMessages messages, the fault applied once
// faultAt of them were stored (or published), with a prefetch of
// faultPrefetch.
const faultMessages, faultAt, faultPrefetch = 400, 100, 20

// faultRestarts is the node restart (and item retry, for a publisher) of
// a run under a fault: enough for a fault that resets every connection
// until it heals, with a pause between attempts.
func faultRestarts(o *resilience.Options) {
	o.NodeRestart.MaxRestarts = 50
	o.NodeRestart.Backoff = resilience.Constant(100 * time.Millisecond)
	o.NodeRetry.MaxRetries = 50
	o.NodeRetry.Backoff = resilience.Constant(100 * time.Millisecond)
}

var errHung = errors.New("connectortest: the run under the fault did not end in time")

// An injection applies a fault to a proxy once triggered, and lifts it
// when the fault's time is up, or once the connector gave up a connection.
type injection struct {
	f     fault
	px    *Proxy
	bound time.Duration // how soon the connector must give up a connection

	trigger   chan struct{}
	once      sync.Once
	restarted chan struct{} // closed at the first node restart
	restOnce  sync.Once
	done      chan struct{}

	startMu sync.Mutex
	started time.Time // when the fault was applied

	// Set by the injection's goroutine, read after done.
	applied      bool
	connsAtFault int // connections through the proxy when the fault began
	// The bytes the proxy had read from the clients and from the broker
	// when the fault was applied, and when it was lifted: what lies
	// between went through the fault's toxics.
	upAtFault, downAtFault int64
	upAtLift, downAtLift   int64
	noticed                time.Duration // from the fault to the connector's giving up; 0 if it did not
	late                   bool          // the connector did not give up within bound
}

func newInjection(f fault, px *Proxy, bound time.Duration) *injection {
	return &injection{f: f, px: px, bound: bound, trigger: make(chan struct{}),
		restarted: make(chan struct{}), done: make(chan struct{})}
}

// fire applies the fault, from any goroutine, once.
func (in *injection) fire() { in.once.Do(func() { close(in.trigger) }) }

// start returns when the fault was applied; the zero time before.
func (in *injection) start() time.Time {
	in.startMu.Lock()
	defer in.startMu.Unlock()
	return in.started
}

// restart tells the injection that the connector gave a connection up.
func (in *injection) restart() { in.restOnce.Do(func() { close(in.restarted) }) }

// run applies the fault when fired and lifts it; it returns when ctx ends
// first, lifting what it applied.
func (in *injection) run(ctx context.Context) {
	defer close(in.done)
	select {
	case <-in.trigger:
	case <-ctx.Done():
		return
	}
	up, down := in.f.up(), in.f.down()
	start := time.Now()
	in.startMu.Lock()
	in.started = start
	in.startMu.Unlock()
	in.connsAtFault = in.px.Connections()
	in.px.set(up, down, true, in.f.fresh)
	in.upAtFault, in.downAtFault = in.px.bytesIn()
	in.applied = true
	defer func() {
		in.upAtLift, in.downAtLift = in.px.bytesIn()
		in.px.set(nil, nil, true, true)
	}()
	if in.f.lasts > 0 {
		t := time.NewTimer(in.f.lasts)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return
	}
	// Polled: a reconnection shows as a second connection through the
	// proxy even before the engine reports the restart.
	first := in.px.Connections()
	limit := time.NewTimer(in.bound)
	defer limit.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-in.restarted:
			in.noticed = time.Since(start)
			return
		case <-tick.C:
			if in.px.Connections() > first {
				in.noticed = time.Since(start)
				return
			}
		case <-limit.C:
			in.late = true
			return
		case <-ctx.Done():
			return
		}
	}
}

// cancelWhenLate cancels the run once the injection found the connector
// late giving a connection up: the case has failed, and a connector that
// never notices a silent link would otherwise hold the run to its
// deadline. It returns when the injection or ctx ends.
func (in *injection) cancelWhenLate(ctx context.Context, cancel context.CancelFunc) {
	select {
	case <-in.done:
		if in.late {
			cancel()
		}
	case <-ctx.Done():
	}
}

// bound returns the fault's bound for h.
func faultBound[M any](h Harness[M], f fault) time.Duration {
	if !f.silent {
		return linkBound
	}
	if b, ok := any(h).(DeadLinkBounder); ok {
		return b.DeadLinkBound()
	}
	return DefaultDeadLinkBound
}

// runDeadline is how long a run under f may take in all: the fault, the
// bound to notice it, and room to finish.
func runDeadline(f fault, bound time.Duration) time.Duration {
	return f.lasts + bound + 45*time.Second
}

// A restartObserver tells an injection about node restarts, and counts
// them.
type restartObserver struct {
	observer.Nop
	in *injection
	n  atomic.Int64

	mu   sync.Mutex
	errs []string // the first errors that restarted a node, for the log
}

func (o *restartObserver) OnRetry(e observer.RetryEvent) {
	if e.Kind == resilience.NodeRestart || e.Kind == resilience.NodeRetry {
		o.n.Add(1)
		o.in.restart()
		o.mu.Lock()
		if len(o.errs) < 3 {
			o.errs = append(o.errs, fmt.Sprintf("%s %d after %s: %v", e.Kind, e.Attempt, time.Since(o.in.start()).Round(time.Millisecond), e.Err))
		}
		o.mu.Unlock()
	}
}

// log writes the first errors that restarted a node to t's log.
func (o *restartObserver) log(t testing.TB) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.errs {
		t.Logf("%s: %s", o.in.f.name, e)
	}
}

// checkInjection asserts what every fault case asserts of the injection:
// it was applied, to a connection of the connector (one at least went
// through the proxy when it began: a connector that dials the broker
// instead of the address it was given is never touched by the fault), a
// fault that lasts a while acted on the connector's bytes (some reached
// the proxy, one way or the other, while it was on), and a fault that
// ends connections was noticed within its bound.
func checkInjection(t testing.TB, in *injection, started time.Time) {
	require.True(t, in.applied, "the fault was applied")
	require.Positive(t, in.connsAtFault,
		"%s: a connection of the connector went through the proxy when the fault began (it dials the address it is given: SourceConfig.Addr, NewPublisherVia's addr)", in.f.name)
	up, down := in.upAtLift-in.upAtFault, in.downAtLift-in.downAtFault
	if in.f.lasts > 0 {
		t.Logf("%s: %d bytes to the broker and %d to the connector reached the proxy while the fault was on", in.f.name, up, down)
		require.Positive(t, up+down,
			"%s: the connector's bytes went through the proxy while the fault was on (it dials the address it is given for every connection)", in.f.name)
	}
	if in.f.lasts == 0 {
		assert.False(t, in.late, "the connector gave up the %s connection within %s", in.f.name, in.bound)
		t.Logf("%s: the connector gave up the connection %s after the fault", in.f.name, in.noticed.Round(time.Millisecond))
	}
	t.Logf("%s: the run took %s", in.f.name, time.Since(started).Round(time.Millisecond))
}

// consumeUnderFault consumes faultMessages messages through a proxy,
// applying f once faultAt are stored: every message is stored, each
// duplicate is counted (none unless the fault may end connections, and
// then at most a prefetch for each session given up), a connection
// ended is given up within the fault's bound, the run ends within its
// deadline, and nothing is left in the queue.
func consumeUnderFault[M any](f fault) func(t testing.TB, h Harness[M]) {
	return func(t testing.TB, h Harness[M]) {
		ctx := caseContext(t)
		cfg := SourceConfig{Queue: queueName(t), Prefetch: faultPrefetch}
		h.CreateQueue(t, cfg)
		want := keys(faultMessages)
		h.Publish(t, cfg.Queue, messages(want...)...)
		px := NewProxy(t, h.Addr())
		viaProxy := cfg
		viaProxy.Addr = px.Addr()

		bound := faultBound(h, f)
		in := newInjection(f, px, bound)
		obs := &restartObserver{in: in}
		runCtx, cancel := context.WithTimeoutCause(ctx, runDeadline(f, bound), errHung)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() { in.run(runCtx) })
		wg.Go(func() { in.cancelWhenLate(runCtx, cancel) })
		defer wg.Wait()
		defer cancel()

		s := newSeen()
		var written atomic.Int64
		c := consumption[M]{h: h, cfg: viaProxy, restart: faultRestarts,
			opts: []pipeline.Option{pipeline.WithObserver(obs)},
			store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
				if written.Add(1) == faultAt {
					in.fire()
				}
				if s.add(m.Key) == faultMessages {
					p.Drain()
				}
				return nil
			}}
		started := time.Now()
		_, err := c.build(t).Run(runCtx)
		cancel()
		<-in.done
		obs.log(t)
		checkInjection(t, in, started)
		require.NoError(t, err, "the run under %s ends cleanly", f.name)

		counts := s.snapshot()
		require.Len(t, counts, faultMessages, "no message is lost")
		// A broker that redelivers the messages of a lost connection after
		// an ack wait (NATS) still holds them: a source on a sound
		// connection takes them, as acrossADisconnect does.
		if left := h.Pending(t, cfg.Queue); left > 0 {
			again, err := consumeTotal(ctx, t, h, cfg, left)
			require.NoError(t, err)
			for k, n := range again.snapshot() {
				counts[k] += n
			}
		}
		checkDuplicates(t, in, counts, cfg.Prefetch, obs.n.Load(), connsPerSession(h))
		requirePending(t, h, cfg.Queue, 0, "every message was acked")
	}
}

// checkDuplicates asserts the duplicates a fault may cost: none for a
// fault that ends no connection (and no restart or retry: the connector
// rides it out), none either when no connection was opened since the fault
// began and nothing restarted or retried (the connection open then was
// kept); otherwise at most perConn for each session the connector gave
// up, and at least one (the session the fault ended).
//
// The sessions given up are counted from the connections opened since the
// fault that carried bytes both ways (a connection reset before it
// carried a byte each way replaced nothing: it cost no duplicate), taken
// perSession at a time (a client that opens several connections for one
// session, one per request kind, replaces a session with several), and no
// more than the engine saw given up, restarts (node restarts and retries,
// and item retries for a publisher): a connector that the engine saw give
// up one session loses one session's messages in flight, however many
// connections it opens again.
func checkDuplicates(t testing.TB, in *injection, counts map[string]int, perConn int, restarts int64, perSession int) {
	f := in.f
	dups := 0
	for _, n := range counts {
		dups += n - 1
	}
	conns := in.px.Connections()
	carried := in.px.carriedSince(in.connsAtFault)
	perSession = max(perSession, 1)
	sessions := (carried + perSession - 1) / perSession
	if restarts > 0 && restarts < int64(sessions) {
		sessions = int(restarts)
	}
	lost := max(sessions, 1)
	t.Logf("%s: %d duplicates, %d connections through the proxy (%d when the fault began, %d since that carried bytes both ways, %d a session), %d restarts or retries: %d sessions given up",
		f.name, dups, conns, in.connsAtFault, carried, perSession, restarts, lost)
	if !f.cuts {
		assert.Zero(t, dups, "%s ends no connection: no message comes twice", f.name)
		assert.Zero(t, restarts, "%s ends no connection: the connector rides it out, without a restart or a retry", f.name)
		return
	}
	if conns == in.connsAtFault && restarts == 0 {
		assert.Zero(t, dups, "%s ended no connection (none opened since, no restart or retry): no message comes twice", f.name)
		return
	}
	assert.LessOrEqual(t, dups, perConn*lost, "%s: at most %d duplicates for each of the %d sessions given up", f.name, perConn, lost)
}

// connsPerSession returns the connections h's connector opens for one
// session with its broker: 1 unless h says ([SessionSizer]).
func connsPerSession[M any](h Harness[M]) int {
	if s, ok := any(h).(SessionSizer); ok {
		return max(s.ConnectionsPerSession(), 1)
	}
	return 1
}

// publishUnderFault publishes faultMessages messages through a proxy
// with the harness's publisher, applying f once faultAt writes started:
// the broker holds every message, each duplicate is counted (none unless
// the fault may end connections, and then at most a write in flight for
// each session given up), and the run ends within its deadline.
func publishUnderFault[M any](f fault) func(t testing.TB, h Harness[M]) {
	return func(t testing.TB, h Harness[M]) {
		via, ok := any(h).(PublisherVia)
		if !ok {
			t.Skipf("connectortest: the harness does not implement PublisherVia: the publisher's %s case is skipped", f.name)
		}
		ctx := caseContext(t)
		cfg := SourceConfig{Queue: queueName(t), Prefetch: faultPrefetch}
		h.CreateQueue(t, cfg)
		px := NewProxy(t, h.Addr())
		pub, err := via.NewPublisherVia(cfg.Queue, px.Addr())
		require.NoError(t, err, "connectortest: Harness.NewPublisherVia")

		bound := faultBound(h, f)
		in := newInjection(f, px, bound)
		obs := &restartObserver{in: in}
		runCtx, cancel := context.WithTimeoutCause(ctx, runDeadline(f, bound), errHung)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() { in.run(runCtx) })
		wg.Go(func() { in.cancelWhenLate(runCtx, cancel) })
		defer wg.Wait()
		defer cancel()

		const parallel = 4
		var writes atomic.Int64
		counted := countingSink{Sink: pub, write: func() {
			if writes.Add(1) == faultAt {
				in.fire()
			}
		}}
		b := pipeline.New("connectortest-publish", pipeline.WithObserver(obs))
		pipeline.Sink(b, "publish", pipeline.Source(b, "messages", pipelinetest.NewSliceSource(messages(keys(faultMessages)...)...)),
			counted, pipeline.Parallel(parallel), pipeline.NodeResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 50
				o.ItemRetry.Backoff = resilience.Constant(100 * time.Millisecond)
				faultRestarts(o)
			}))
		p, err := b.Build()
		require.NoError(t, err)
		started := time.Now()
		res, err := p.Run(runCtx)
		cancel()
		<-in.done
		obs.log(t)
		checkInjection(t, in, started)
		require.NoError(t, err, "publishing under %s ends cleanly", f.name)
		assert.EqualValues(t, faultMessages, nodeStats(t, res, "publish").Out)

		// The queue holds each message at least once, and a duplicate for
		// a write whose outcome the lost connection left unknown.
		held := h.Pending(t, cfg.Queue)
		got, err := consumeTotal(ctx, t, h, cfg, held)
		require.NoError(t, err)
		counts := got.snapshot()
		require.Len(t, counts, faultMessages, "the broker holds every message the publisher's Write returned for")
		st := nodeStats(t, res, "publish")
		checkDuplicates(t, in, counts, parallel, st.ItemRetries+st.NodeRestarts+st.NodeRetries, connsPerSession(h))
		requirePending(t, h, cfg.Queue, 0, "every message was consumed")
	}
}

// consumeTotal consumes cfg.Queue until total messages were stored,
// duplicates included, then drains the pipeline.
func consumeTotal[M any](ctx context.Context, t testing.TB, h Harness[M], cfg SourceConfig, total int) (*seen, error) {
	s := newSeen()
	var n atomic.Int64
	c := consumption[M]{h: h, cfg: cfg, store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
		s.add(m.Key)
		if n.Add(1) == int64(total) {
			p.Drain()
		}
		return nil
	}}
	_, err := c.build(t).Run(ctx)
	return s, err
}

// A countingSink is a publisher that calls write before each Write, and
// keeps the publisher's Open, Close and Flush.
type countingSink struct {
	node.Sink[Message]
	write func()
}

func (c countingSink) Write(ctx context.Context, m Message) error {
	c.write()
	return c.Sink.Write(ctx, m)
}

func (c countingSink) Open(ctx context.Context) error {
	if o, ok := c.Sink.(interface{ Open(context.Context) error }); ok {
		return o.Open(ctx)
	}
	return nil
}

func (c countingSink) Close(ctx context.Context) error {
	if o, ok := c.Sink.(interface{ Close(context.Context) error }); ok {
		return o.Close(ctx)
	}
	return nil
}

func (c countingSink) Flush(ctx context.Context) error {
	if o, ok := c.Sink.(interface{ Flush(context.Context) error }); ok {
		return o.Flush(ctx)
	}
	return nil
}
