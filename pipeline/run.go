package pipeline

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/hook"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// runState is one run of a Pipeline.
type runState struct {
	p      *Pipeline
	id     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	// parent is the caller's context, which Run's context is a child of.
	parent context.Context
	// calls gives the calls of user code their context (see
	// nodeRun.enterCall): the caller's context, which a failure of the
	// run ends only a grace period later, so that a call running when the
	// run fails may finish.
	calls *callGrace
	// nodes holds every node's runtime, set before any node starts.
	nodes []*nodeRun
	start time.Time
	edges []any // each node's input edge, by node id
	reg   *registry
	// flusher hands over what idle sources leave pending; nil when no
	// source needs it (see needsFlusher).
	flusher *flusher
	// before holds every node's counters at the start of the run; it does
	// not change once the run is published in Pipeline.current.
	before []NodeStats
	ended  atomic.Bool
	// observed is false when the observer is observer.Nop: hot paths then
	// build no event, which would read the clock.
	observed bool
	drains   drainState
	// tracer is the Tracer Run's context carries, nil without one: every
	// attempt then runs in a span of its own (see traced).
	tracer observer.Tracer
	// ledgers are the sources' ledgers of positions, in a run with
	// checkpoints (see checkpoint.go); set before any node starts.
	ledgers []*ledger
	// loaded is each source's position as loaded from the store, and
	// restored and restoredWM the window logs and watermarks saved with
	// it, by Aggregate; windowLogs
	// are the run's window logs (see windowlog.go), set before any node
	// starts.
	loaded     map[string][]byte
	restored   map[string][]loggedWindow
	restoredWM map[string]time.Time
	windowLogs []windowLogger
}

func (p *Pipeline) run(parent context.Context) (Result, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	rs := &runState{p: p, id: p.newRunID(), ctx: ctx, cancel: cancel, parent: parent, start: p.cfg.clock.Now()}
	rs.calls = newCallGrace(parent, p.cfg.clock, p.failGrace(), rs.running)
	defer rs.calls.end()
	rs.drains.ch = make(chan struct{})
	_, nop := p.cfg.observer.(observer.Nop)
	rs.observed = !nop
	rs.tracer = observer.TracerFrom(parent)
	rs.reg = newRegistry(func(src string, err error) {
		rs.fail(src, fmt.Errorf("pipeline: EmitTracked done callback panicked: %w", err))
	})
	before := make([]NodeStats, len(p.nodes))
	for i, n := range p.nodes {
		before[i] = n.stats.snapshot(n.name, n.kind)
	}
	rs.before = before
	start := rs.setClocks()
	if start == nil {
		start = rs.resume(ctx)
	}
	if err := start; err != nil {
		// No node started: the run ends before it began.
		res := Result{Pipeline: p.name, RunID: rs.id, Start: rs.start, Nodes: make([]NodeStats, len(p.nodes))}
		for i, n := range p.nodes {
			res.Nodes[i] = NodeStats{Node: n.name, Kind: n.kind}
		}
		return res, err
	}
	p.current.Store(rs)
	defer rs.ended.Store(true)
	defer rs.stopDrain()
	// A signal that RunUntilSignal received before the run was published
	// drains it now, before any source starts.
	signalled := attachDrainRequest(parent, rs)

	rs.edges = make([]any, len(p.nodes))
	for _, n := range p.nodes {
		if n.newEdge != nil {
			buffer := p.cfg.buffer
			if n.cfg.buffer >= 0 {
				buffer = n.cfg.buffer
			}
			rs.edges[n.id] = n.newEdge(buffer, p.cfg.handOver)
		}
	}
	for _, n := range p.nodes {
		if !n.consumes && needsFlusher(p.cfg, n) {
			rs.flusher = newFlusher()
			defer rs.flusher.close()
			break
		}
	}
	// Every runner, and so every writer, exists before any goroutine
	// starts: an edge must know all its writers before the first of them
	// can finish and close it.
	nodes := make([]*nodeRun, len(p.nodes))
	for i, n := range p.nodes {
		nctx, ncancel := context.WithCancel(ctx)
		defer ncancel()
		nodes[i] = &nodeRun{rs: rs, spec: n, ctx: nctx}
		nodes[i].r = n.newRunner(nodes[i])
	}
	rs.nodes = nodes
	stopSaver := rs.startSaver()
	var (
		c      crew
		failed atomic.Bool
	)
	for _, nr := range nodes {
		c.Go(func() error {
			if err := owned(nr.run); err != nil {
				failed.Store(true)
				rs.fail(nr.spec.name, err)
			}
			return nil
		})
	}
	_ = c.Wait() // every node's error is the run's, above
	// Nothing is left to drain: a signal from now on changes nothing.
	signalled.nodesFinished()
	if rs.flusher != nil {
		if err := rs.flusher.close(); err != nil {
			failed.Store(true)
			rs.cancel(err)
		}
	}
	// Items still tracked fail now, while their sources are open to hear
	// it; then the sources close.
	unsettled := rs.reg.failAll()
	// Every item settled or failed: the positions are final.
	stopSaver()
	saveErr := rs.finalSave(parent, !failed.Load() && context.Cause(ctx) == nil)
	for _, nr := range nodes {
		if nr.closeLater {
			if err := nr.close(); err != nil {
				failed.Store(true)
				rs.fail(nr.spec.name, err)
			}
		}
	}

	res := Result{Pipeline: p.name, RunID: rs.id, Start: rs.start, Duration: p.cfg.clock.Since(rs.start),
		Nodes: make([]NodeStats, len(p.nodes))}
	for i, n := range p.nodes {
		res.Nodes[i] = minus(n.stats.snapshot(n.name, n.kind), before[i])
		if n.breaker != nil {
			res.Nodes[i].Circuit = n.breaker.State()
		}
	}
	// Only a node failure, a panicking done callback, a panic of the
	// flusher or the caller cancels ctx before Run returns, so its cause is the run's error. A caller who
	// cancels after every node finished gets the success it had.
	err := context.Cause(ctx)
	var ne *NodeError
	if !failed.Load() && !errors.As(err, &ne) {
		err = nil
	}
	if err == nil && unsettled > 0 {
		// Every node ended cleanly, yet items were left without an
		// outcome: never report that as a success.
		err = fmt.Errorf("%w: %d tracked items reached no outcome", errUnsettled, unsettled)
	}
	return res, errors.Join(err, saveErr)
}

// errUnsettled is the error of a run whose nodes all ended cleanly while
// tracked items were left without an outcome. That would be a bug in the
// engine; Run reports it rather than a success.
var errUnsettled = errors.New("pipeline: items left unsettled")

// fail cancels the run with the failure of the node called name; the first
// failure wins, later ones are echoes of it. The run stops taking and
// handing on items at once, but the calls of user code already running go
// on, until they return or the grace period ends (see callGrace).
func (rs *runState) fail(name string, err error) {
	rs.cancel(&NodeError{Node: name, Err: err})
	rs.calls.start(rs.ctx)
}

// echoed waits, when the caller's context ended, until ctx (a node's
// context, which descends from it) ended too. A call of user code gets the
// calls' context, a sibling of the run's under the caller's: cancelling
// the caller's context ends them in no set order, and a call that returns
// the echo of its own context's end could otherwise be judged while its
// node's context still runs, as the item's failure (dead-lettered,
// counted Failed, the run reported a success). It is called on the
// failure path only, after a call returned an error.
func (nr *nodeRun) echoed(ctx context.Context) {
	if ctx.Err() == nil && nr.rs.parent.Err() != nil {
		<-ctx.Done()
	}
}

// isCancellation reports whether err is only the echo of ctx ending.
func isCancellation(ctx context.Context, err error) bool {
	if ctx.Err() == nil {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Cause(ctx))
}

// newRunID returns 16 random hex digits. They come from crypto/rand, not
// from WithRand's source: a seeded source would give every process that
// uses the same seed the same run ids, and dead letters of different runs
// could no longer be told apart.
func (p *Pipeline) newRunID() string {
	var b [8]byte
	if _, err := cryptorand.Read(b[:]); err != nil {
		panic("sluice: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// notify sends ev to the pipeline's observer through on, a method
// expression such as observer.Observer.OnRetry, which needs no closure. A
// panic in the observer fails the run, naming the node the event was about
// and the event.
func notify[E any](rs *runState, n *spec, on func(observer.Observer, E), ev E) {
	if err := observe(rs.p.cfg.observer, on, ev); err != nil {
		rs.fail(n.name, fmt.Errorf("pipeline: observer panicked on %T: %w", ev, err))
	}
}

func observe[E any](o observer.Observer, on func(observer.Observer, E), ev E) (err error) {
	defer recovered(&err)
	on(o, ev)
	return nil
}

func (rs *runState) event(n *spec) observer.Event {
	return observer.Event{Pipeline: rs.p.name, RunID: rs.id, Node: n.name, Time: rs.p.cfg.clock.Now()}
}

// wait waits d on the pipeline's clock, or until ctx is done.
func (rs *runState) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := rs.p.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		// Re-check: the timer and the cancellation may have raced.
		return context.Cause(ctx)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// waitOr is wait that also ends, with errDrainWoke, when woke is closed.
func (rs *runState) waitOr(ctx context.Context, d time.Duration, woke <-chan struct{}) error {
	select {
	case <-woke:
		return errDrainWoke
	default:
	}
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := rs.p.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return context.Cause(ctx)
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-woke:
		return errDrainWoke
	}
}

// A runner is one node's runtime for one run. The driver in nodeRun calls
// open, then body until it succeeds or the layers give up, then finish on
// success, and close for every open that succeeded.
type runner interface {
	// open calls the node's Open, if it has one.
	open(ctx context.Context) error
	// body processes input until it ends. After a restart it is called
	// again and resumes from the checkpoint.
	body(ctx context.Context) error
	// finish runs after body succeeded: it flushes a sink and hands over
	// and closes the node's output.
	finish(ctx context.Context) error
	// close calls the node's Close, if it has one.
	close(ctx context.Context) error
	// consumed reports whether the node took any input (a source: emitted
	// any item) in this run.
	consumed() bool
	// progress returns how many items the node completed in this run.
	progress() int64
	// restarting prepares the input to be replayed from the checkpoint.
	restarting()
	// reopens reports whether the node has an Open, so that a restart
	// closes and opens it again; a node without one is closed only at the
	// end of the run.
	reopens() bool
}

// nodeRun drives one node through a run: lifecycle, node restart (layer 2)
// inside node retry (layer 3).
type nodeRun struct {
	rs *runState
	// ctx is the node's own child of the run's context: each node waits on
	// a done channel of its own, so that nodes blocking and waking do not
	// contend for one channel's lock.
	ctx    context.Context
	spec   *spec
	r      runner
	opened bool // open succeeded and close has not run since
	// closeLater is set for a source whose Close waits for the run's end.
	closeLater bool
	// groupCalls is the calls scope of the body of a node whose workers
	// run in a group (see group), nil outside one.
	groupCalls *callGrace
	// running counts the node's calls of user code running now (see
	// enterCall).
	running atomic.Int64
	// restarts is how many node restarts the node used since its last
	// reset (see nodeRestart), for a group that decides whether a
	// worker's failure fails the node for good (see failsForGood).
	restarts atomic.Int64
	// blamed holds the trackers of the items that failed the node under
	// the Fail action since its last restart (see blame): a restart takes
	// them up again, so a run that stops while the node waits to restart
	// stopped for another reason than theirs (see nodeRestart).
	blamedMu sync.Mutex
	blamed   []*tracker
}

// blame blames tr's item for failing the node, and notes it.
func (nr *nodeRun) blame(tr *tracker) {
	if tr == nil {
		return
	}
	tr.blame()
	nr.blamedMu.Lock()
	nr.blamed = append(nr.blamed, tr)
	nr.blamedMu.Unlock()
}

// takeBlamed returns the trackers blamed since the last call.
func (nr *nodeRun) takeBlamed() []*tracker {
	nr.blamedMu.Lock()
	defer nr.blamedMu.Unlock()
	b := nr.blamed
	nr.blamed = nil
	return b
}

// callsUser reports whether node n calls a function of the user's on the
// items it takes in, whose calls a retry budget counts as first attempts
// and a tracer traces: not a Batch, Unbatch, Merge, branch or a Join's
// tagging transform, which only move items along.
func callsUser(n *spec) bool { return infoOf(n.kind).callsUser && !n.tagging }

// isCallCounter reports whether r counts its node's first calls as it
// makes them (see proc.countsCalls).
func isCallCounter(r runner) bool {
	_, ok := r.(interface{ countsCalls() })
	return ok
}

func (nr *nodeRun) run() error {
	rs, n := nr.rs, nr.spec
	if b := n.res.RetryBudget; b != nil && n.consumes && callsUser(n) {
		// The budget's first attempts are the node's first calls, counted
		// as they are made, not as items arrive: a node that holds a
		// backlog (Keyed, a large Buffer) goes on calling long after its
		// input ended or drained, and its retries keep their allowance.
		// A Join or an Aggregate calls the user's function as it takes
		// each item in: its input count stands for its calls, that of
		// batches for a node that takes batches.
		calls := &n.stats.in
		switch {
		case isCallCounter(nr.r):
			calls = &n.stats.calls
		case n.inSize != nil:
			calls = &n.stats.inBatches
		}
		defer hook.TrackBudget(b, calls)()
	}
	notify(rs, n, observer.Observer.OnNodeStarted, observer.NodeEvent{Event: rs.event(n)})
	err := nr.nodeRetry()
	err = errors.Join(err, nr.closeLast())
	if isCancellation(rs.ctx, err) {
		err = context.Cause(rs.ctx)
	}
	ev := observer.NodeEvent{Event: rs.event(n), Err: err}
	var ne *NodeError
	switch {
	case err == nil:
	case errors.As(err, &ne):
		// The run's cause names the node that failed: the others stopped.
		ev.Stopped, ev.StoppedBy = ne.Node != n.name, ne.Node
		if !ev.Stopped {
			ev.StoppedBy = ""
		}
	case errors.Is(err, context.Canceled), errors.Is(err, ErrDrainTimeout):
		// The caller cancelled the run, or a drain ran out of time.
		ev.Stopped = true
	}
	notify(rs, n, observer.Observer.OnNodeCompleted, ev)
	return err
}

// nodeRetry is layer 3: it runs the node again from the start when it failed
// before consuming any input and the failure is transient. A node with an
// Open is closed before it is opened again; one without keeps its state.
func (nr *nodeRun) nodeRetry() error {
	rs, n := nr.rs, nr.spec
	o := n.res.NodeRetry
	elapsed := &elapsedCap{max: o.MaxElapsed}
	for retry := 0; ; retry++ {
		err := nr.nodeRestart()
		if err == nil || nr.r.consumed() || rs.ctx.Err() != nil {
			return err
		}
		transient, err := classify(rs.ctx, o.Classifier, err)
		if !transient {
			return err
		}
		if retry >= o.MaxRetries {
			if retry == 0 {
				return err
			}
			return nr.exhausted(resilience.NodeRetry, retry+1, err)
		}
		if nr.r.reopens() {
			if cerr := nr.close(); cerr != nil {
				return errors.Join(err, cerr)
			}
		}
		if nr.drainedSource() {
			return nr.r.finish(nr.ctx)
		}
		if err := nr.backoff(resilience.NodeRetry, o.Backoff, retry+1, err, elapsed, nil); err != nil {
			if errors.Is(err, errDrainWoke) {
				return nr.r.finish(nr.ctx)
			}
			return err
		}
	}
}

// nodeRestart is layer 2: when the node fails after consuming input, it waits
// and resumes from the checkpoint; a node with an Open is closed before the
// wait and opened again after it.
func (nr *nodeRun) nodeRestart() error {
	rs, n := nr.rs, nr.spec
	o := n.res.NodeRestart
	ctx := nr.ctx
	if nr.drainedSource() {
		// Drained before it opened: its input ends here.
		return nr.r.finish(ctx)
	}
	if err := nr.open(); err != nil {
		return err
	}
	restarts := 0
	mark := int64(0)
	elapsed := &elapsedCap{max: o.MaxElapsed}
	for {
		err := nr.r.body(ctx)
		if err == nil && ctx.Err() != nil {
			// The input ended, but the run is stopping: a node completes
			// only in a run that goes on, so a cancelled run never
			// flushes a sink as if its input had ended.
			err = context.Cause(ctx)
		}
		if err == nil {
			return nr.r.finish(ctx)
		}
		if rs.ctx.Err() != nil || !nr.r.consumed() || !restartable(err) {
			return err
		}
		if o.ResetAfterItems > 0 && nr.r.progress()-mark >= int64(o.ResetAfterItems) {
			restarts = 0
			nr.restarts.Store(0)
			elapsed.first = time.Time{}
		}
		for {
			if restarts >= o.MaxRestarts {
				if restarts == 0 {
					return err
				}
				return nr.exhausted(resilience.NodeRestart, restarts+1, err)
			}
			if nr.drainedSource() {
				// A restart would only be drained: the input ends here,
				// and the broker keeps what was not emitted.
				return nr.r.finish(ctx)
			}
			restarts++
			nr.restarts.Store(int64(restarts))
			// The restart takes the items that failed the node up again:
			// should the run stop while the node waits to restart, they
			// did not fail it, and end Failed, not Rejected. One that
			// fails the node again is blamed again. Not when the restart
			// is refused for its MaxElapsed: the items failed the node
			// for good, as when MaxRestarts is spent (backoff calls
			// unblame only once the wait is allowed).
			blamed := nr.takeBlamed()
			unblame := func() {
				for _, tr := range blamed {
					tr.unblame()
				}
			}
			reopen := nr.r.reopens()
			if reopen {
				// A sink that buffers is flushed before it is closed to
				// be opened again: the items it took were delivered, and
				// a Close without a Flush may drop them. A Flush that
				// fails fails the run, which then saves no position
				// past them; the items that failed the node did not
				// end it.
				// Only an open sink: after an Open that failed, the loop
				// comes here with the sink closed.
				// The Flush is a call of user code like a Write: when the
				// run fails meanwhile, it gets the grace period.
				if f, ok := nr.r.(restartFlusher); ok && nr.opened {
					ferr := f.flushForRestart(nr.enterCall(ctx))
					nr.leaveCall()
					if ferr != nil {
						// The calls' context may end before the run's
						// when the caller cancels: the run's end, not
						// the flush, is then what stopped it.
						nr.echoed(ctx)
						unblame()
						return &notRestartable{fmt.Errorf("%w; flush before the restart: %w (what the sink took since it opened may be lost)", err, ferr)}
					}
				}
				if cerr := nr.close(); cerr != nil {
					err = errors.Join(err, cerr)
				}
			}
			if werr := nr.backoff(resilience.NodeRestart, o.Backoff, restarts, err, elapsed, unblame); werr != nil {
				if errors.Is(werr, errDrainWoke) {
					return nr.r.finish(ctx)
				}
				return werr
			}
			if !reopen {
				break
			}
			if err = nr.open(); err == nil {
				break
			}
			if rs.ctx.Err() != nil {
				return err
			}
		}
		mark = nr.r.progress()
		nr.r.restarting()
	}
}

// open opens the node unless it is open.
func (nr *nodeRun) open() error {
	if nr.opened {
		return nil
	}
	if err := nr.r.open(nr.ctx); err != nil {
		return err
	}
	nr.opened = true
	return nil
}

// closeLast closes the node when it is done for this run. A source that
// emitted items is closed only when the whole run has ended (see
// closeSources): the items it emitted may still be on their way, and their
// completion callbacks (a broker's acks) need it open.
func (nr *nodeRun) closeLast() error {
	if !nr.spec.consumes && nr.r.consumed() && nr.opened {
		nr.closeLater = true
		return nil
	}
	return nr.close()
}

// close closes the node if it is open, with a context the run's end does
// not cancel, so that it can release what it holds.
func (nr *nodeRun) close() error {
	if !nr.opened {
		return nil
	}
	nr.opened = false
	return nr.r.close(context.WithoutCancel(nr.rs.ctx))
}

// backoff counts a retry of layer k, reports it, and waits its delay.
// allowed, when not nil, is called once the retry is not refused for its
// MaxElapsed, before the wait; and when the backoff itself failed (a
// panic in it is no item's fault).
func (nr *nodeRun) backoff(k resilience.RetryKind, b resilience.Backoff, retry int, cause error, elapsed *elapsedCap, allowed func()) error {
	rs, n := nr.rs, nr.spec
	if allowed == nil {
		allowed = func() {}
	}
	d, perr := delay(b, retry, rs.p.cfg.rand)
	if perr != nil {
		allowed()
		return perr
	}
	if elapsed.over(rs.p.cfg.clock.Now(), d) {
		return nr.exhaustedBy(k, retry, cause, resilience.LimitElapsed, "")
	}
	allowed()
	n.stats.retry(k)
	notify(rs, n, observer.Observer.OnRetry, observer.RetryEvent{Event: rs.event(n), Kind: k, Attempt: retry, Delay: d, Err: cause})
	if n.kind == KindSource {
		// A drain ends a source's wait: it will not be opened again.
		return rs.waitOr(nr.ctx, d, rs.drains.ch)
	}
	return rs.wait(nr.ctx, d)
}

func (nr *nodeRun) exhausted(k resilience.RetryKind, attempts int, err error) error {
	return nr.exhaustedBy(k, attempts, err, resilience.LimitCount, "")
}

// exhaustedBy reports that layer k gave up, ended by limit; key is the
// item's, for layer 1.
func (nr *nodeRun) exhaustedBy(k resilience.RetryKind, attempts int, err error, limit resilience.Limit, key string) error {
	rs, n := nr.rs, nr.spec
	notify(rs, n, observer.Observer.OnRetryExhausted, observer.RetryExhaustedEvent{Event: rs.event(n), Key: key, Kind: k, Attempts: attempts, Limit: limit, Err: err})
	return &resilience.RetryExhaustedError{Node: n.name, Kind: k, Attempts: attempts, Limit: limit, Err: err}
}

// An elapsedCap is a layer's MaxElapsed: no retry starts past max from the
// first failure. A nil cap, or a zero max, caps nothing.
type elapsedCap struct {
	max   time.Duration
	first time.Time
}

// over reports whether a retry after a wait of d, now, would start past
// the cap; the first call marks the first failure.
func (c *elapsedCap) over(now time.Time, d time.Duration) bool {
	if c == nil || c.max <= 0 {
		return false
	}
	if c.first.IsZero() {
		c.first = now
	}
	return now.Add(d).After(c.first.Add(c.max))
}

// notRestartable marks failures that node restart must not repeat.
type notRestartable struct{ err error }

func (e *notRestartable) Error() string { return e.err.Error() }
func (e *notRestartable) Unwrap() error { return e.err }

func restartable(err error) bool {
	var nr *notRestartable
	var co *resilience.CircuitOpenError
	return !errors.As(err, &nr) && !errors.As(err, &co)
}

// outcomeOf is the outcome a failure action gives an item.
func outcomeOf(a resilience.FailureAction) node.Outcome {
	switch a {
	case resilience.Skip:
		return node.Skipped
	case resilience.DeadLetter:
		return node.DeadLettered
	}
	return node.Failed
}
