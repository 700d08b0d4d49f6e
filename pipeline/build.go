package pipeline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// Build checks the graph and every node's options and returns a Pipeline
// that can be run, or every problem found, joined; each is a
// [*BuildError] naming the node. The Pipeline is independent: it has its
// own counters, circuit breakers and replay windows, and nodes added to
// the Builder later change only later Builds.
func (b *Builder) Build() (*Pipeline, error) {
	c := &buildCheck{pipeline: b.name}
	c.recorded(b.errs)
	c.pipelineProblems(checkName(b.name), checkConfig(b.cfg), checkCheckpoint(b.cfg))

	nodes := b.snapshot()
	names := make(map[string]bool, len(nodes))
	breakers := breakerUse{pipe: resilience.ForProfile(b.cfg.profile).CircuitBreaker}
	for _, n := range nodes {
		c.nodeProblems(n,
			checkNodeName(n, names),
			checkOutput(n),
			checkWorkers(n),
			checkBuffer(n),
			checkPark(n),
			checkKindOptions(n),
			checkRateLimit(n),
			checkOwn(n),
			checkRefused(n),
			resolveResilience(b.cfg, n, &breakers),
			checkEventTimeKind(b.cfg, n),
			checkJoinTimeKind(b.cfg, n),
			checkWindowLog(b.cfg, nodes, n),
		)
	}
	c.pipelineProblems(breakers.check(b.cfg.profile), checkEnds(nodes))
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	for _, n := range nodes {
		n.logWindows = logsWindows(b.cfg, nodes, n)
	}
	return b.assemble(nodes)
}

// A buildCheck gathers the problems Build finds, each as a [*BuildError]
// naming the pipeline and the node.
type buildCheck struct {
	pipeline string
	errs     []error
}

// recorded adds the problems the Builder recorded as nodes were added,
// naming the pipeline in a copy of each.
func (c *buildCheck) recorded(errs []error) {
	for _, e := range errs {
		if be, ok := e.(*BuildError); ok {
			cp := *be
			cp.Pipeline = c.pipeline
			e = &cp
		}
		c.errs = append(c.errs, e)
	}
}

// pipelineProblems adds problems of the whole pipeline.
func (c *buildCheck) pipelineProblems(checks ...[]error) {
	for _, errs := range checks {
		for _, e := range errs {
			c.errs = append(c.errs, &BuildError{Pipeline: c.pipeline, Err: e})
		}
	}
}

// nodeProblems adds problems of node n. A node without a name is named
// by none (its problem says which node it is).
func (c *buildCheck) nodeProblems(n *spec, checks ...[]error) {
	for _, errs := range checks {
		for _, e := range errs {
			c.errs = append(c.errs, &BuildError{Pipeline: c.pipeline, Node: n.name, Err: e})
		}
	}
}

// checkName checks the pipeline's name.
func checkName(name string) []error {
	switch {
	case name == "":
		return []error{errors.New("the pipeline has no name")}
	case !utf8.ValidString(name):
		return []error{fmt.Errorf("the pipeline's name %q is not valid UTF-8: observers use names as labels, and Prometheus refuses such a label", name)}
	}
	return nil
}

// checkConfig checks the pipeline's options.
func checkConfig(cfg config) []error {
	var errs []error
	if cfg.buffer < 0 {
		errs = append(errs, fmt.Errorf("WithBuffer(%d): must not be negative", cfg.buffer))
	}
	if cfg.drainTimeout < 0 {
		errs = append(errs, fmt.Errorf("WithDrainTimeout(%s): must not be negative", cfg.drainTimeout))
	}
	if cfg.handOver == 0 || cfg.handOver < -1 {
		errs = append(errs, fmt.Errorf("WithHandOverBatch(%d): must be at least 1", cfg.handOver))
	}
	if cfg.dlRetry.set {
		if cfg.dlRetry.maxRetries < 0 || cfg.dlRetry.maxRetries > resilience.MaxRepeats {
			errs = append(errs, fmt.Errorf("WithDeadLetterRetry(%d, ...): must be in [0, %d]", cfg.dlRetry.maxRetries, resilience.MaxRepeats))
		}
		if err := cfg.dlRetry.backoff.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("WithDeadLetterRetry backoff: %w", err))
		}
	}
	for i, f := range cfg.resilience {
		if f == nil {
			errs = append(errs, fmt.Errorf("WithResilience (option %d of its kind): function is nil", i+1))
		}
	}
	// A nil interface means the default; a nil value inside one (a nil
	// *FakeClock, a nil deadletter.Func) would fail only at Run.
	for _, o := range []struct {
		name string
		v    any
	}{{"WithClock", cfg.clock}, {"WithRand", cfg.rand}, {"WithObserver", cfg.observer}, {"WithDeadLetter", cfg.deadLetter}} {
		if o.v != nil && isNil(o.v) {
			errs = append(errs, fmt.Errorf("%s: the value is a nil %T", o.name, o.v))
		}
	}
	return errs
}

// checkNodeName checks that node n has a name no node before it has;
// names holds those.
func checkNodeName(n *spec, names map[string]bool) []error {
	defer func() { names[n.name] = true }()
	switch {
	case n.name == "":
		return []error{fmt.Errorf("node %d (%s) has no name", n.id+1, n.kind)}
	case names[n.name]:
		return []error{errors.New("name used by another node")}
	case !utf8.ValidString(n.name):
		return []error{fmt.Errorf("node name %q is not valid UTF-8: observers use names as labels, and Prometheus refuses such a label", n.name)}
	}
	return nil
}

// checkOutput checks that node n's output, if it has one, is read.
func checkOutput(n *spec) []error {
	if n.output != nil && len(n.output.consumers) == 0 {
		return []error{errors.New("output stream is consumed by no node: every stream needs a consumer, such as a sink")}
	}
	return nil
}

var errParallelNotSupported = errors.New("Parallel: only " + kindsThat(func(k *kindInfo) bool { return k.parallel }) + " run in parallel")

// checkWorkers checks node n's Keyed and Parallel.
func checkWorkers(n *spec) []error {
	ki := infoOf(n.kind)
	switch {
	case n.cfg.keyed != nil && !ki.keyed:
		return []error{fmt.Errorf("Keyed: only %s keep per-key order, not a %s", kindsThat(func(k *kindInfo) bool { return k.keyed }), n.kind)}
	case n.cfg.keyed != nil && n.cfg.keyedN < 1:
		return []error{fmt.Errorf("Keyed(%d): must be at least 1", n.cfg.keyedN)}
	case n.cfg.parallel < 1:
		return []error{fmt.Errorf("Parallel(%d): must be at least 1", n.cfg.parallel)}
	case n.cfg.parallel > 1 && n.cfg.keyed == nil && !ki.parallel:
		return []error{errParallelNotSupported}
	}
	return nil
}

// checkBuffer checks node n's Buffer.
func checkBuffer(n *spec) []error {
	var errs []error
	if n.cfg.buffer < -1 {
		errs = append(errs, fmt.Errorf("Buffer(%d): must not be negative", n.cfg.buffer))
	}
	if n.cfg.buffer != -1 && !infoOf(n.kind).consumes {
		errs = append(errs, fmt.Errorf("Buffer: a %s has no input channel; set Buffer on the nodes that read it", n.kind))
	}
	return errs
}

// checkPark checks node n's MaxParked.
func checkPark(n *spec) []error {
	if err := parkCheck(n.cfg); err != nil {
		return []error{err}
	}
	return nil
}

// checkKindOptions checks that node n has only the options its kind
// takes, of those that only some kinds take.
func checkKindOptions(n *spec) []error {
	var errs []error
	ki := infoOf(n.kind)
	if n.cfg.withKey != nil && !ki.emits {
		errs = append(errs, fmt.Errorf("SourceKey: only a source gives its items keys, not a %s", n.kind))
	}
	if n.cfg.withTrace != nil && !ki.emits {
		errs = append(errs, fmt.Errorf("SourceTraceHeaders: only a source gives its items trace headers, not a %s", n.kind))
	}
	if n.cfg.fallback != nil && !ki.fallback {
		errs = append(errs, fmt.Errorf("Fallback: only a transform has one, not a %s", n.kind))
	}
	if n.cfg.reuseSlice && !n.callsOnSlices {
		errs = append(errs, fmt.Errorf("ReuseSlice: a %s calls no function on slices; only MapBatch and ForEachBatch do", n.kind))
	}
	if n.cfg.maxParkedSet && !ki.parks {
		errs = append(errs, fmt.Errorf("MaxParked(%d): a %s never parks an item; only %s do", n.cfg.maxParked, n.kind,
			kindsThat(func(k *kindInfo) bool { return k.parks })))
	}
	return errs
}

// checkRateLimit checks node n's RateLimit.
func checkRateLimit(n *spec) []error {
	c := n.cfg
	switch {
	case !c.limited:
		return nil
	case !infoOf(n.kind).rateLimited:
		return []error{fmt.Errorf("RateLimit: a %s calls no function to limit; only %s", n.kind, kindsThat(func(k *kindInfo) bool { return k.rateLimited }))}
	case !(c.rate > 0) || math.IsInf(c.rate, 0):
		return []error{fmt.Errorf("RateLimit(%v, %d): perSecond must be a positive number", c.rate, c.burst)}
	case c.burst < 1:
		return []error{fmt.Errorf("RateLimit(%v, %d): burst must be at least 1", c.rate, c.burst)}
	}
	return nil
}

// checkOwn returns the problems of node n's own settings, which the
// function that added it checks.
func checkOwn(n *spec) []error {
	if n.validate == nil {
		return nil
	}
	return n.validate()
}

// A breakerUse is what Build learns of the breakers: the options
// WithResilience gives every node, and whether some node turns its
// breaker on.
type breakerUse struct {
	pipe resilience.CircuitBreakerOptions
	on   bool
}

// check returns the problems of a breaker setting WithResilience made
// while no node turns its breaker on: it would do nothing.
func (u *breakerUse) check(profile resilience.Profile) []error {
	if u.on {
		return nil
	}
	def := resilience.ForProfile(profile).CircuitBreaker
	return breakerSetButOff(def, u.pipe, def, "WithResilience")
}

// resolveResilience sets node n's resilience options, from the profile,
// WithResilience and NodeResilience, and returns their problems; it notes
// in u the node's breaker.
func resolveResilience(cfg config, n *spec, u *breakerUse) []error {
	pipe, res, err := nodeOptions(cfg, n)
	if err != nil {
		return []error{err}
	}
	var errs []error
	// A breaker setting the node's own options made, with the breaker
	// off, would do nothing; one WithResilience made is checked once,
	// for the whole pipeline (breakerUse.check).
	def := resilience.ForProfile(cfg.profile).CircuitBreaker
	errs = append(errs, breakerSetButOff(pipe.CircuitBreaker, res.CircuitBreaker, def, "")...)
	// A breaker guards the calls of a transform, sink or flat map: one
	// on another kind of node runs nowhere.
	u.pipe = pipe.CircuitBreaker
	u.on = u.on || (res.CircuitBreaker.Enabled && infoOf(n.kind).fallible)
	// The rules are the Build's own: a slice changed after Build
	// changes nothing here.
	res.FailureRules = slices.Clone(res.FailureRules)
	n.res = res
	n.mayDeadLetter = mayDeadLetter(res)
	if err := n.res.Validate(); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	if n.mayDeadLetter && cfg.deadLetter == nil {
		what := "OnItemFailure"
		if n.res.OnItemFailure != resilience.DeadLetter {
			what = "a FailureRules Action"
		}
		errs = append(errs, fmt.Errorf("resilience: %s = dead_letter: the pipeline has no dead-letter sink (WithDeadLetter)", what))
	}
	return errs
}

// checkEnds checks that the graph has a source and a sink.
func checkEnds(nodes []*spec) []error {
	var sources, sinks int
	for _, n := range nodes {
		if !n.consumes {
			sources++
		}
		if n.output == nil {
			sinks++
		}
	}
	var errs []error
	if len(nodes) > 0 && sources == 0 {
		errs = append(errs, errors.New("the pipeline has no source"))
	}
	if sinks == 0 {
		errs = append(errs, errors.New("the pipeline has no sink"))
	}
	return errs
}

// assemble returns the Pipeline of checked nodes, with the defaults of
// the options not given filled in.
func (b *Builder) assemble(nodes []*spec) (*Pipeline, error) {
	cfg := b.cfg
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
