// Package otel reports what Sluice pipelines do as OpenTelemetry metrics,
// through the API of go.opentelemetry.io/otel/metric: the same figures as
// package observer/prometheus, for any OpenTelemetry SDK and exporter.
//
// An [Observer] is an [observer.Observer] to give to
// [pipeline.WithObserver]. Per-item counts are observable instruments: a
// callback reads them through [observer.StatsReader] when the SDK collects,
// so a pipeline that fails nothing pays nothing per item for being
// measured. Exhausted retries and the retry delay histogram, which no
// counter holds, are recorded from events.
//
//	o, err := otel.New(meterProvider)
//	b := pipeline.New("orders", pipeline.WithObserver(o))
//	// ... add nodes ...
//	p, err := b.Build() // the Observer now reads p's counters
//
// Instrument names and units are chosen so that the OpenTelemetry
// Prometheus exporter produces the names of package observer/prometheus:
// sluice.items.in becomes sluice_items_in_total. Attributes are pipeline,
// node and kind, as the Prometheus labels. docs/observability.md lists
// every instrument.
package otel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	otelglobal "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/internal/same"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// ScopeName is the instrumentation scope of the Observer's meter.
const ScopeName = "github.com/sluicehq/sluice/observer/otel"

// The names of the instruments an Observer creates.
const (
	ItemsIn          = "sluice.items.in"          // Int64ObservableCounter, {item}
	ItemsOut         = "sluice.items.out"         // Int64ObservableCounter, {item}
	ItemsFailed      = "sluice.items.failed"      // Int64ObservableCounter, {item}
	ItemsFiltered    = "sluice.items.filtered"    // Int64ObservableCounter, {item}
	DeadLetters      = "sluice.dead_letters"      // Int64ObservableCounter, {item}
	Drops            = "sluice.drops"             // Int64ObservableCounter, {item}
	Retries          = "sluice.retries"           // Int64ObservableCounter, {retry}
	RetriesExhausted = "sluice.retries.exhausted" // Int64Counter, {exhaustion}
	Fallbacks        = "sluice.fallbacks"         // Int64ObservableCounter, {item}
	RetryDelay       = "sluice.retry.delay"       // Float64Histogram, s
	CircuitState     = "sluice.circuit.state"     // Int64ObservableGauge, {state}
	ItemsInFlight    = "sluice.items.in_flight"   // Int64ObservableUpDownCounter, {item}
	BrokerRetries    = "sluice.broker_retries"    // Int64ObservableCounter, {item}
	HandedOff        = "sluice.handed_off"        // Int64ObservableCounter, {item}
	LateItems        = "sluice.late_items"        // Int64ObservableCounter, {item}
)

// The attribute keys of every measurement.
const (
	AttrPipeline = attribute.Key("pipeline")
	AttrNode     = attribute.Key("node")
	AttrKind     = attribute.Key("kind")  // the retry layer: item_retry, node_restart, node_retry
	AttrLimit    = attribute.Key("limit") // what ended a layer's retries: count, elapsed, budget
)

// An Option configures an Observer.
type Option func(*config)

type config struct {
	buckets []float64
}

// WithDelayBuckets sets the bounds, in seconds and strictly increasing, of
// the buckets of the retry delay histogram. The default is 0.001, 0.005,
// 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 and 300. The bounds
// are advice to the SDK, which views may override.
func WithDelayBuckets(bounds ...float64) Option {
	return func(c *config) { c.buckets = slices.Clone(bounds) }
}

// An Observer records the metrics of the pipelines it observes. Give it to
// pipeline.WithObserver when building each pipeline: Build hands it the
// pipeline's counters (see [Observer.UseStats]). Several pipelines may
// share one Observer; their measurements differ by the pipeline attribute.
//
// An Observer is safe for concurrent use. Create one with [New].
type Observer struct {
	mu      sync.RWMutex
	targets []*target
	byName  map[string]*target
	reg     metric.Registration

	exhausted metric.Int64Counter
	delay     metric.Float64Histogram
	// kindAttrs caches the attributes of event measurements, by
	// pipeline, node and kind, so that an event allocates them once.
	kindAttrs sync.Map // kindKey → metric.MeasurementOption

	in, out, failed, filtered, deadLetters, drops, fallbacks, retries metric.Int64ObservableCounter
	brokerRetries, handedOff, late                                    metric.Int64ObservableCounter
	circuit                                                           metric.Int64ObservableGauge
	inFlight                                                          metric.Int64ObservableUpDownCounter
}

// A target is an observed pipeline with the attributes of its nodes.
type target struct {
	r     observer.StatsReader
	nodes []metric.MeasurementOption   // pipeline, node
	kinds [][]metric.MeasurementOption // pipeline, node, kind; by node, then RetryKind - 1
	// zeros are the exhaustion series that start at zero, recorded when
	// the pipeline first runs (zeroed), not at Build: a counter's series
	// cannot be deleted, and a Build that fails after UseStats (another
	// observer refused the pipeline) must leave none. Guarded by o.mu.
	zeros  []metric.AddOption
	zeroed bool
}

type kindKey struct {
	pipeline, node string
	kind           resilience.RetryKind
}

var (
	kinds  = resilience.RetryKinds()
	limits = resilience.Limits()
)

// New returns an Observer whose instruments come from a meter of mp named
// [ScopeName]. A nil mp is the global MeterProvider. It fails when an
// instrument or the callback cannot be created.
func New(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	cfg := config{buckets: observer.DelayBuckets()}
	for _, o := range opts {
		o(&cfg)
	}
	if mp == nil {
		mp = otelglobal.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	o := &Observer{byName: make(map[string]*target)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	o.in = counter(ItemsIn, "{item}", "Items a node took in from its input.")
	o.out = counter(ItemsOut, "{item}", "Items a node handed downstream; for a sink, items written.")
	o.failed = counter(ItemsFailed, "{item}", "Items whose processing failed after item retries, whatever happened to them next, except those a Fallback rescued.")
	o.filtered = counter(ItemsFiltered, "{item}", "Items a filter dropped, or a flat map or unbatch turned into nothing.")
	o.deadLetters = counter(DeadLetters, "{item}", "Items a node sent to the dead-letter sink, which stored them.")
	o.brokerRetries = counter(BrokerRetries, "{item}",
		"Items a node sent to the dead-letter sink, which gave them back to their broker's retry path instead of storing them: not dead letters.")
	o.late = counter(LateItems, "{item}", "Items an event-time Aggregate or Join took in behind its watermark (less an Aggregate's allowed lateness): too late for their windows or partners.")
	o.handedOff = counter(HandedOff, "{item}", "Items whose item retry a node handed to their source's broker, to be delivered again after the wait.")
	o.drops = counter(Drops, "{item}", "Items a node dropped because its failure action is skip.")
	o.fallbacks = counter(Fallbacks, "{item}", "Items a node's Fallback rescued after its item retries gave up.")
	o.retries = counter(Retries, "{retry}", "Retries a node made, by layer (kind): item_retry, node_restart, node_retry.")
	var err error
	o.circuit, err = m.Int64ObservableGauge(CircuitState, metric.WithUnit("{state}"),
		metric.WithDescription("State of a node's circuit breaker: 0 closed (also without a breaker), 1 open, 2 half-open."))
	errs = append(errs, err)
	o.inFlight, err = m.Int64ObservableUpDownCounter(ItemsInFlight, metric.WithUnit("{item}"),
		metric.WithDescription("Items a transform, sink, filter, merge or route (and each of its branches) took in during the current run and has not yet handed on, written, filtered, skipped, dead-lettered, given back to its broker or handed off; 0 while the pipeline is not running."))
	errs = append(errs, err)
	o.exhausted, err = m.Int64Counter(RetriesExhausted, metric.WithUnit("{exhaustion}"),
		metric.WithDescription("Times a resilience layer of a node ran out of retries, by layer (kind) and by what ended them (limit): count, elapsed, budget."))
	errs = append(errs, err)
	o.delay, err = m.Float64Histogram(RetryDelay, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(cfg.buckets...),
		metric.WithDescription("Delays chosen before retries, jitter included, in seconds, by layer (kind)."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel: creating instruments: %w", err)
	}
	o.reg, err = m.RegisterCallback(o.observe, o.in, o.out, o.failed, o.filtered, o.deadLetters, o.drops, o.fallbacks, o.retries, o.circuit, o.inFlight,
		o.brokerRetries, o.handedOff, o.late)
	if err != nil {
		return nil, fmt.Errorf("otel: registering the callback: %w", err)
	}
	return o, nil
}

// ForgetStats lets go of a pipeline that UseStats took: the callback no
// longer reads it, and its name may be observed again. Multi calls it when
// a Build fails after the Observer took the pipeline.
func (o *Observer) ForgetStats(r observer.StatsReader) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name, t := range o.byName {
		if same.Is(t.r, r) {
			delete(o.byName, name)
			o.targets = slices.DeleteFunc(o.targets, func(x *target) bool { return x == t })
		}
	}
}

// UseStats makes the Observer report the counters r reads at every
// collection; pipeline.Builder.Build calls it with each pipeline built
// with the Observer. Observing the same pipeline again does nothing;
// observing another pipeline of the same name is an error, which fails the
// Build, since their measurements could not be told apart.
func (o *Observer) UseStats(r observer.StatsReader) error {
	if r == nil {
		return errors.New("otel: UseStats: nil reader")
	}
	s := r.Stats()
	name := s.Pipeline
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.byName[name]; ok {
		if same.Is(t.r, r) {
			return nil
		}
		return fmt.Errorf("otel: a pipeline named %q is already observed", name)
	}
	t := &target{r: r}
	for _, n := range s.Nodes {
		t.nodes = append(t.nodes, metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(name), AttrNode.String(n.Node))))
		byKind := make([]metric.MeasurementOption, len(kinds))
		for i, k := range kinds {
			byKind[i] = o.attrs(name, n.Node, k)
			// Exhaustion counters start at zero, as the Prometheus ones do:
			// only those that can move, from the pipeline's first run.
			for _, l := range limits {
				if n.Exhaustible.Has(k, l) {
					t.zeros = append(t.zeros, o.limitAttrs(name, n.Node, k, l))
				}
			}
		}
		t.kinds = append(t.kinds, byKind)
	}
	o.targets = append(o.targets, t)
	o.byName[name] = t
	return nil
}

// Close unregisters the callback that reads the observed pipelines'
// counters. Events are still recorded.
func (o *Observer) Close() error {
	if err := o.reg.Unregister(); err != nil {
		return fmt.Errorf("otel: unregistering the callback: %w", err)
	}
	return nil
}

// attrs returns the attributes of a measurement about layer k of a node.

// limitAttrs returns the attributes of an exhaustion: attrs' and the limit.
func (o *Observer) limitAttrs(pl, node string, k resilience.RetryKind, l resilience.Limit) metric.MeasurementOption {
	key := limitKey{kindKey{pl, node, k}, l}
	if v, ok := o.kindAttrs.Load(key); ok {
		return v.(metric.MeasurementOption)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(pl), AttrNode.String(node), AttrKind.String(k.String()), AttrLimit.String(l.String())))
	v, _ := o.kindAttrs.LoadOrStore(key, opt)
	return v.(metric.MeasurementOption)
}

type limitKey struct {
	kindKey
	limit resilience.Limit
}

func (o *Observer) attrs(pl, node string, k resilience.RetryKind) metric.MeasurementOption {
	key := kindKey{pl, node, k}
	if v, ok := o.kindAttrs.Load(key); ok {
		return v.(metric.MeasurementOption)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(pl), AttrNode.String(node), AttrKind.String(k.String())))
	v, _ := o.kindAttrs.LoadOrStore(key, opt)
	return v.(metric.MeasurementOption)
}

// observe is the callback: it reads every observed pipeline's counters.
func (o *Observer) observe(_ context.Context, ob metric.Observer) error {
	o.mu.RLock()
	ts := slices.Clone(o.targets)
	o.mu.RUnlock()
	for _, t := range ts {
		s := t.r.Stats()
		for i, n := range s.Nodes {
			at := t.nodes[i]
			ob.ObserveInt64(o.in, n.In, at)
			ob.ObserveInt64(o.out, n.Out, at)
			ob.ObserveInt64(o.failed, n.Failed, at)
			ob.ObserveInt64(o.filtered, n.Filtered, at)
			ob.ObserveInt64(o.deadLetters, n.DeadLettered, at)
			ob.ObserveInt64(o.drops, n.Skipped, at)
			ob.ObserveInt64(o.fallbacks, n.Fallbacks, at)
			// Only nodes whose items went back to a broker, as the
			// Prometheus series.
			if n.BrokerRetries != 0 {
				ob.ObserveInt64(o.brokerRetries, n.BrokerRetries, at)
			}
			if n.HandedOff != 0 {
				ob.ObserveInt64(o.handedOff, n.HandedOff, at)
			}
			if n.Late != 0 {
				ob.ObserveInt64(o.late, n.Late, at)
			}
			for j, k := range kinds {
				ob.ObserveInt64(o.retries, n.Retries(k), t.kinds[i][j])
			}
			ob.ObserveInt64(o.circuit, int64(n.Circuit), at)
			if n.HasInFlight() {
				ob.ObserveInt64(o.inFlight, n.InFlight, at)
			}
		}
	}
	return nil
}

// OnNodeStarted starts the exhaustion counters of the pipeline at zero,
// once, at its first run. The items in flight are in the pipeline's Stats.
func (o *Observer) OnNodeStarted(e observer.NodeEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.byName[e.Pipeline]
	if t == nil || t.zeroed {
		return
	}
	t.zeroed = true
	for _, opt := range t.zeros {
		o.exhausted.Add(context.Background(), 0, opt)
	}
	t.zeros = nil
}

// OnNodeCompleted does nothing: a node's counts are in its counters.
func (o *Observer) OnNodeCompleted(observer.NodeEvent) {}

// OnRetry records the delay chosen in the retry delay histogram. The
// retry itself is counted by the engine.
func (o *Observer) OnRetry(e observer.RetryEvent) {
	o.delay.Record(context.Background(), e.Delay.Seconds(), o.attrs(e.Pipeline, e.Node, e.Kind))
}

// OnRetryExhausted counts the exhaustion.
func (o *Observer) OnRetryExhausted(e observer.RetryExhaustedEvent) {
	o.exhausted.Add(context.Background(), 1, o.limitAttrs(e.Pipeline, e.Node, e.Kind, e.Limit))
}

// OnDeadLetter does nothing: dead letters are counted by the engine.
func (o *Observer) OnDeadLetter(observer.DeadLetterEvent) {}

// OnDrop does nothing: drops are counted by the engine.
func (o *Observer) OnDrop(observer.DropEvent) {}

// OnCircuitStateChanged does nothing: the state is read at collection time.
func (o *Observer) OnCircuitStateChanged(observer.CircuitEvent) {}

var _ observer.StatsUser = (*Observer)(nil)
