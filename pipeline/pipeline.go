// Package pipeline builds and runs Sluice pipelines: typed graphs of
// sources, transforms and sinks, each run as goroutine stages joined by
// bounded channels, with the resilience layers of package resilience
// applied around every node.
//
// A [Builder] collects nodes; each node function returns a typed [Stream]
// that the next node takes as input:
//
//	b := pipeline.New("orders")
//	orders := pipeline.Source(b, "read", src)
//	priced := pipeline.Transform(b, "price", orders, pricer, pipeline.Parallel(8))
//	pipeline.Sink(b, "store", priced, store)
//	p, err := b.Build()
//	res, err := p.Run(ctx)
//
// Build validates the whole graph and every node's options and returns all
// problems at once. Run blocks until every goroutine it started has
// returned. The first failure stops the run, and Run returns it as a
// [*NodeError] naming the node; calls of user code already running may
// finish within a grace period (see [DefaultFailGrace]).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// A Builder collects the nodes of one pipeline. Its methods and the node
// functions are not safe for concurrent use; build a pipeline from one
// goroutine. A Pipeline it built shares nothing with it, so a Pipeline
// may run while the Builder is changed or builds again.
type Builder struct {
	name  string
	cfg   config
	nodes []*spec
	errs  []error
}

// New returns a Builder for a pipeline called name. A nil option is
// reported by Build.
func New(name string, opts ...Option) *Builder {
	b := &Builder{name: name, cfg: config{handOver: -1}}
	for i, o := range opts {
		if o == nil {
			b.errs = append(b.errs, &BuildError{Err: fmt.Errorf("pipeline.New: option %d is nil", i+1)})
			continue
		}
		o(&b.cfg)
	}
	return b
}

// A Stream is the typed output of a node. Give it as the input of another
// node; giving one Stream to several nodes broadcasts every item to each.
// The zero Stream belongs to no builder and is refused by Build.
type Stream[T any] struct {
	s *stream
}

type stream struct {
	b         *Builder
	producer  *spec
	consumers []*spec
}

// A spec is one node of a graph, with the typed hooks that create its
// runtime for each run. A Builder holds the specs it was given; Build
// copies them, so that each Pipeline holds specs of its own, with its own
// resilience options, breaker and counters, and consumers that later
// changes of the Builder do not reach.
type spec struct {
	id       int
	name     string
	kind     NodeKind
	cfg      nodeConfig
	inputs   []*stream // the streams this node reads; one edge carries them all
	output   *stream   // nil for a sink
	consumes bool      // false for a source

	// Set by Build on the Pipeline's copy.
	res     resilience.Options
	breaker *resilience.Breaker
	stats   *counters
	// mayDeadLetter is res.MayDeadLetter(): failures keep their history.
	mayDeadLetter bool
	// limiter is the node's RateLimit, shared by its workers and runs.
	limiter *limiter
	// redeliveries is a source's node.Redeliverer, for Plan; nil without.
	redeliveries func() (int, time.Duration)
	// size is a source's node.Sized, for Stats; nil without.
	size func() int64
	// tagging marks a Join's tagging transforms, whose function never
	// fails: Graph shows no layer on them.
	tagging bool
	// givesBatches marks a node whose output carries batches; inSize
	// (a func(In) int) and outSize (a func(Out) int) give the items in
	// one input or output item when it takes or gives batches, and
	// itemSize the same for an input item as any (see batchcount.go).
	givesBatches    bool
	inSize, outSize any
	itemSize        func(any) int64

	// validate reports problems of the node's own settings.
	validate func() []error
	// newEdge makes the node's input edge for one run.
	newEdge func(buffer, batch int) any
	// newRunner makes the node's runtime for one run.
	newRunner func(n *nodeRun) runner
}

// add records a node; in are the streams it reads.
func (b *Builder) add(name string, kind NodeKind, opts []NodeOption, in ...*stream) *spec {
	s := &spec{id: len(b.nodes), name: name, kind: kind, inputs: in, consumes: consumes(kind),
		cfg: nodeConfig{parallel: 1, buffer: -1}}
	for i, o := range opts {
		if o == nil {
			b.errs = append(b.errs, &BuildError{Node: name, Err: fmt.Errorf("NodeOption %d is nil", i+1)})
			continue
		}
		o(&s.cfg)
	}
	for _, st := range in {
		switch {
		case st == nil:
			b.errs = append(b.errs, &BuildError{Node: name, Err: errors.New("input is a zero Stream, not the output of a node")})
		case st.b != b:
			b.errs = append(b.errs, &BuildError{Node: name, Err: fmt.Errorf("input comes from another builder (pipeline %q)", st.b.name)})
		default:
			st.consumers = append(st.consumers, s)
		}
	}
	b.nodes = append(b.nodes, s)
	return s
}

func (b *Builder) output(s *spec) *stream {
	s.output = &stream{b: b, producer: s}
	return s.output
}

// ErrInvalid is matched by every [*BuildError] with [errors.Is].
var ErrInvalid = errors.New("pipeline: invalid pipeline")

// A BuildError is one problem Build found. Node is empty for a problem of
// the whole pipeline.
type BuildError struct {
	// Pipeline is the name of the pipeline being built.
	Pipeline string
	// Node is the node the problem is in; empty for the whole pipeline.
	Node string
	// Err is the problem, such as a [*resilience.OptionError].
	Err error
}

// Error names the pipeline, the node and the problem.
func (e *BuildError) Error() string {
	if e.Node == "" {
		return fmt.Sprintf("pipeline %q: %v", e.Pipeline, e.Err)
	}
	return fmt.Sprintf("pipeline %q: node %q: %v", e.Pipeline, e.Node, e.Err)
}

// Is reports whether target is [ErrInvalid].
func (e *BuildError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the problem.
func (e *BuildError) Unwrap() error { return e.Err }

// A NodeError is the failure of one node, as Run returns it.
type NodeError struct {
	// Node is the name of the node that failed.
	Node string
	// Err is its failure.
	Err error
}

// Error names the node and its failure.
func (e *NodeError) Error() string { return fmt.Sprintf("pipeline: node %q: %v", e.Node, e.Err) }

// Unwrap returns the node's failure.
func (e *NodeError) Unwrap() error { return e.Err }

// ErrRunning is returned by Run while the same Pipeline is already running.
var ErrRunning = errors.New("pipeline: already running")

// Build checks the graph and every node's options and returns a Pipeline
// that can be run, or every problem found, joined; each is a
// [*BuildError] naming the node. The Pipeline is independent: it has its
// own counters, circuit breakers and replay windows, and nodes added to
// the Builder later change only later Builds.
func (b *Builder) Build() (*Pipeline, error) {
	cfg := b.cfg
	errs := make([]error, 0, len(b.errs))
	for _, e := range b.errs {
		if be, ok := e.(*BuildError); ok {
			c := *be
			c.Pipeline = b.name
			e = &c
		}
		errs = append(errs, e)
	}
	fail := func(node string, err error) {
		errs = append(errs, &BuildError{Pipeline: b.name, Node: node, Err: err})
	}
	if b.name == "" {
		fail("", errors.New("the pipeline has no name"))
	}
	if cfg.buffer < 0 {
		fail("", fmt.Errorf("WithBuffer(%d): must not be negative", cfg.buffer))
	}
	if cfg.handOver == 0 || cfg.handOver < -1 {
		fail("", fmt.Errorf("WithHandOverBatch(%d): must be at least 1", cfg.handOver))
	}
	if cfg.dlRetry.set {
		if cfg.dlRetry.maxRetries < 0 || cfg.dlRetry.maxRetries > resilience.MaxRepeats {
			fail("", fmt.Errorf("WithDeadLetterRetry(%d, ...): must be in [0, %d]", cfg.dlRetry.maxRetries, resilience.MaxRepeats))
		}
		if err := cfg.dlRetry.backoff.Validate(); err != nil {
			fail("", fmt.Errorf("WithDeadLetterRetry backoff: %w", err))
		}
	}

	for i, f := range cfg.resilience {
		if f == nil {
			fail("", fmt.Errorf("WithResilience (option %d of its kind): function is nil", i+1))
		}
	}
	// A nil interface means the default; a nil value inside one (a nil
	// *FakeClock, a nil deadletter.Func) would fail only at Run.
	for _, o := range []struct {
		name string
		v    any
	}{{"WithClock", cfg.clock}, {"WithRand", cfg.rand}, {"WithObserver", cfg.observer}, {"WithDeadLetter", cfg.deadLetter}} {
		if o.v != nil && isNil(o.v) {
			fail("", fmt.Errorf("%s: the value is a nil %T", o.name, o.v))
		}
	}

	nodes := b.snapshot()
	var sources, sinks int
	// The breaker options WithResilience gives every node, and whether
	// some node turns its breaker on.
	pipeBreaker, breakerOn := resilience.ForProfile(cfg.profile).CircuitBreaker, false
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		switch {
		case n.name == "":
			fail("", fmt.Errorf("node %d (%s) has no name", n.id+1, n.kind))
		case seen[n.name]:
			fail(n.name, errors.New("name used by another node"))
		}
		seen[n.name] = true
		if !n.consumes {
			sources++
		}
		if n.output == nil {
			sinks++
		} else if len(n.output.consumers) == 0 {
			fail(n.name, errors.New("output stream is consumed by no node: every stream needs a consumer, such as a sink"))
		}
		switch {
		case n.cfg.keyed != nil && n.kind != KindTransform && n.kind != KindSink && n.kind != KindFilter && n.kind != KindFlatMap:
			fail(n.name, fmt.Errorf("Keyed: only transforms, sinks, filters and flat maps keep per-key order, not a %s", n.kind))
		case n.cfg.keyed != nil && n.cfg.keyedN < 1:
			fail(n.name, fmt.Errorf("Keyed(%d): must be at least 1", n.cfg.keyedN))
		case n.cfg.parallel < 1:
			fail(n.name, fmt.Errorf("Parallel(%d): must be at least 1", n.cfg.parallel))
		}
		if n.cfg.buffer < -1 {
			fail(n.name, fmt.Errorf("Buffer(%d): must not be negative", n.cfg.buffer))
		}
		if err := parkCheck(n.cfg); err != nil {
			fail(n.name, err)
		}
		if n.cfg.withKey != nil && n.kind != KindSource {
			fail(n.name, fmt.Errorf("WithKey: only a source gives its items keys, not a %s", n.kind))
		}
		if n.cfg.withTrace != nil && n.kind != KindSource {
			fail(n.name, fmt.Errorf("WithTraceHeaders: only a source gives its items trace headers, not a %s", n.kind))
		}
		if n.cfg.fallback != nil && n.kind != KindTransform {
			fail(n.name, fmt.Errorf("Fallback: only a transform has one, not a %s", n.kind))
		}
		if c := n.cfg; c.limited {
			switch {
			case n.kind != KindTransform && n.kind != KindSink && n.kind != KindFilter && n.kind != KindFlatMap:
				fail(n.name, fmt.Errorf("RateLimit: a %s calls no function to limit; only transforms, sinks, filters and flat maps", n.kind))
			case !(c.rate > 0) || math.IsInf(c.rate, 0):
				fail(n.name, fmt.Errorf("RateLimit(%v, %d): perSecond must be a positive number", c.rate, c.burst))
			case c.burst < 1:
				fail(n.name, fmt.Errorf("RateLimit(%v, %d): burst must be at least 1", c.rate, c.burst))
			}
		}
		if n.validate != nil {
			for _, e := range n.validate() {
				fail(n.name, e)
			}
		}
		pipe, res, err := nodeOptions(cfg, n)
		if err != nil {
			fail(n.name, err)
			continue
		}
		// A breaker setting the node's own options made, with the breaker
		// off, would do nothing; one WithResilience made is checked once,
		// below, for the whole pipeline.
		def := resilience.ForProfile(cfg.profile).CircuitBreaker
		for _, e := range breakerSetButOff(pipe.CircuitBreaker, res.CircuitBreaker, def, "") {
			fail(n.name, e)
		}
		// A breaker guards the calls of a transform, sink or flat map: one
		// on another kind of node runs nowhere.
		pipeBreaker = pipe.CircuitBreaker
		breakerOn = breakerOn || (res.CircuitBreaker.Enabled && callsFallible(n.kind))
		// The rules are the Build's own: a slice changed after Build
		// changes nothing here.
		res.FailureRules = slices.Clone(res.FailureRules)
		n.res = res
		n.mayDeadLetter = res.MayDeadLetter()
		if err := n.res.Validate(); err != nil {
			for _, e := range unjoin(err) {
				fail(n.name, e)
			}
		}
		if n.res.MayDeadLetter() && cfg.deadLetter == nil {
			what := "OnItemFailure"
			if n.res.OnItemFailure != resilience.DeadLetter {
				what = "a FailureRules Action"
			}
			fail(n.name, fmt.Errorf("resilience: %s = dead_letter: the pipeline has no dead-letter sink (WithDeadLetter)", what))
		}
	}
	if !breakerOn {
		def := resilience.ForProfile(cfg.profile).CircuitBreaker
		for _, e := range breakerSetButOff(def, pipeBreaker, def, "WithResilience") {
			fail("", e)
		}
	}
	if len(nodes) > 0 && sources == 0 {
		fail("", errors.New("the pipeline has no source"))
	}
	if sinks == 0 {
		fail("", errors.New("the pipeline has no sink"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	if cfg.clock == nil {
		cfg.clock = clockwork.NewRealClock()
	}
	for _, n := range nodes {
		if n.cfg.limited {
			// On the pipeline's clock, once it is known.
			n.limiter = newLimiter(n.cfg.rate, n.cfg.burst, cfg.clock)
		}
	}
	if cfg.rand == nil {
		cfg.rand = globalRand{}
	} else {
		cfg.rand = &lockedRand{r: cfg.rand}
	}
	if cfg.observer == nil {
		cfg.observer = observer.Nop{}
	}
	if !cfg.dlRetry.set {
		cfg.dlRetry = deadLetterRetry{maxRetries: 5, backoff: resilience.Exponential(100 * time.Millisecond).WithMaxDelay(5 * time.Second)}
	}
	if !cfg.bufferSet {
		cfg.buffer = DefaultBuffer
		if cfg.profile == resilience.ProfileHighThroughput {
			cfg.buffer = HighThroughputBuffer
		}
	}
	if cfg.handOver == -1 {
		cfg.handOver = DefaultHandOverBatch
		if cfg.profile == resilience.ProfileHighThroughput {
			cfg.handOver = HighThroughputHandOverBatch
		}
	}
	p := &Pipeline{name: b.name, cfg: cfg, nodes: nodes}
	for _, n := range nodes {
		if n.res.CircuitBreaker.Enabled {
			n.breaker = resilience.NewBreaker(n.name, n.res.CircuitBreaker, cfg.clock, p.circuitChanged(n))
		}
	}
	if u, ok := cfg.observer.(observer.StatsUser); ok {
		if err := useStats(u, p); err != nil {
			return nil, &BuildError{Pipeline: b.name, Err: fmt.Errorf("observer: %w", err)}
		}
	}
	return p, nil
}

// useStats hands p's counters to an observer that reads them, under the
// panic guard: UseStats is the observer's code.
func useStats(u observer.StatsUser, p *Pipeline) (err error) {
	defer recoveredPolicy("UseStats", &err)
	return u.UseStats(p)
}

// snapshot returns a copy of the Builder's graph: every spec copied, with
// new counters, and every stream's consumers copied and pointing to the
// copies.
func (b *Builder) snapshot() []*spec {
	nodes := make([]*spec, len(b.nodes))
	for i, n := range b.nodes {
		c := *n
		c.inputs = nil
		c.stats = newCounters()
		nodes[i] = &c
	}
	for i, n := range b.nodes {
		if n.output == nil {
			continue
		}
		out := &stream{producer: nodes[i], consumers: make([]*spec, len(n.output.consumers))}
		for j, c := range n.output.consumers {
			out.consumers[j] = nodes[c.id]
		}
		nodes[i].output = out
	}
	return nodes
}

// nodeOptions returns the resilience options of node n: the profile's,
// changed by every WithResilience and then every NodeResilience function;
// and, as pipe, the options after the WithResilience functions alone. A
// nil function or one that panics is reported, naming the option.
func nodeOptions(cfg config, n *spec) (pipe, res resilience.Options, err error) {
	res = resilience.ForProfile(cfg.profile)
	apply := func(what string, fs []func(*resilience.Options)) error {
		for i, f := range fs {
			if f == nil {
				if what == "NodeResilience" {
					return fmt.Errorf("%s (option %d of its kind): function is nil", what, i+1)
				}
				continue // reported once for the pipeline
			}
			if _, err := guard(func() (struct{}, error) { f(&res); return struct{}{}, nil }); err != nil {
				return fmt.Errorf("%s (option %d of its kind): %w", what, i+1, err)
			}
		}
		return nil
	}
	if err := apply("WithResilience", cfg.resilience); err != nil {
		return res, res, err
	}
	pipe = res
	pipe.FailureRules = slices.Clone(res.FailureRules)
	return pipe, res, apply("NodeResilience", n.cfg.resilience)
}

// unjoin returns the errors joined in err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// A Pipeline is a built graph, ready to run. It can be run again after a
// run returns; circuit breakers keep their state between runs, and the
// counters of [Pipeline.Stats] add up over every run.
type Pipeline struct {
	name    string
	cfg     config
	nodes   []*spec
	running atomic.Bool
	current atomic.Pointer[runState] // the running or last run
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.name }

// sourceSize asks a node.Sized source for its size; a panic or a negative
// size is an unknown size, since Stats is read from any goroutine.
func sourceSize(size func() int64) (z int64, ok bool) {
	defer func() {
		if recover() != nil {
			z, ok = 0, false
		}
	}()
	z = size()
	return z, z >= 0
}

// Stats returns a snapshot of every node's counters. It takes no lock and
// may be called at any time, also while the pipeline runs.
func (p *Pipeline) Stats() Stats {
	s := Stats{Pipeline: p.name, Running: p.running.Load(), Nodes: make([]NodeStats, len(p.nodes))}
	rs := p.current.Load()
	if rs != nil {
		s.RunID = rs.id
		s.Draining = rs.drains.on.Load()
	}
	live := rs != nil && !rs.ended.Load()
	for i, n := range p.nodes {
		s.Nodes[i] = n.stats.snapshot(n.name, n.kind)
		s.Nodes[i].Exhaustible = exhaustible(n)
		if n.size != nil {
			if z, ok := sourceSize(n.size); ok {
				s.Nodes[i].Size, s.Nodes[i].Sized = z, true
			}
		}
		if n.breaker != nil {
			s.Nodes[i].Circuit = n.breaker.State()
		}
		if live && s.Nodes[i].HasInFlight() && !(n.inSize != nil && n.kind == KindTransform) {
			// (A transform that takes batches counts the items it took and
			// those of what it returned, which may be fewer or none: the
			// two do not match.)
			// Stages publish their counts in small tallies, so the
			// difference can briefly dip below zero: it is an estimate.
			s.Nodes[i].InFlight = max(0, held(s.Nodes[i])-held(rs.before[i]))
		}
	}
	return s
}

// Run runs the pipeline until every source is exhausted and every item has
// reached an outcome, or until the first failure, or until ctx is done.
// It returns only after every goroutine it started has returned.
//
// The first node that fails for good stops the run: no item is taken in or
// handed on any more, while the calls of user code already running may
// finish, within a grace period ([DefaultFailGrace], or WithDrainTimeout's
// bound), so that each gets its item's real outcome. Run returns the
// failure as a [*NodeError]. When ctx is done first, every call is
// cancelled at once, and Run returns ctx's error (its cause, if it has
// one). The Result holds this run's counts either way.
func (p *Pipeline) Run(ctx context.Context) (Result, error) {
	if !p.running.CompareAndSwap(false, true) {
		return Result{Pipeline: p.name}, ErrRunning
	}
	defer p.running.Store(false)
	return p.run(ctx)
}

func (p *Pipeline) circuitChanged(n *spec) func(resilience.Transition) {
	return func(t resilience.Transition) {
		rs := p.current.Load()
		ev := observer.CircuitEvent{
			Event: observer.Event{Pipeline: p.name, Node: n.name, Time: t.Time},
			From:  t.From, To: t.To, Generation: t.Generation,
		}
		if rs != nil {
			ev.RunID = rs.id
		}
		if rs != nil {
			notify(rs, n, observer.Observer.OnCircuitStateChanged, ev)
		} else {
			p.cfg.observer.OnCircuitStateChanged(ev)
		}
	}
}
