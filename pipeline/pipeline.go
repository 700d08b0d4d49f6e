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

// New returns a Builder for a pipeline called name, which Build wants
// non-empty and valid UTF-8, as each node's name. A nil option is
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
	// mayDeadLetter is mayDeadLetter(res): failures keep their history.
	mayDeadLetter bool
	// limiter is the node's RateLimit, shared by its workers and runs.
	limiter *limiter
	// redeliveries is a source's node.Redeliverer, for Plan; nil without.
	redeliveries func() (int, time.Duration)
	// size is a source's node.Sized, for Stats; nil without.
	size func() int64
	// resume is a source's node.Resumable, called before each run; nil
	// without.
	resume func(pos []byte) error
	// setClock is the node's ClockSetter, called before each run; nil
	// without.
	setClock func(clockwork.Clock)
	// flushes marks a sink that buffers (node.Flusher): what it wrote is
	// safe only once its Flush, at the end of a run that succeeds,
	// returned nil, so it holds checkpoint positions back until then.
	flushes bool
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
	// windowKey is an event-time Aggregate's check of its key type for
	// the window log (see windowlog.go), nil on any other node or window;
	// logWindows says, on the Pipeline's copy, that the node keeps one.
	windowKey  func() error
	logWindows bool
	// callsOnSlices marks a MapBatch or a ForEachBatch, whose function
	// takes a slice: the nodes that take ReuseSlice.
	callsOnSlices bool

	// validate reports problems of the node's own settings.
	validate func() []error
	// newEdge makes the node's input edge for one run.
	newEdge func(buffer, batch int) any
	// newRunner makes the node's runtime for one run.
	newRunner func(n *nodeRun) runner
}

// add records a node; in are the streams it reads.
func (b *Builder) add(name string, kind NodeKind, opts []NodeOption, in ...*stream) *spec {
	s := &spec{id: len(b.nodes), name: name, kind: kind, inputs: in, consumes: infoOf(kind).consumes,
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
