// Package prometheus exports what Sluice pipelines do as Prometheus
// metrics: items in and out of every node, retries by layer, exhausted
// retries, dead letters, broker retries and hand-offs, drops, the delays
// retries chose, circuit breaker state and the items in flight.
//
// A [Collector] is both a [prometheus.Collector], to register on any
// registry, and an [observer.Observer], to give to [pipeline.WithObserver].
// Per-item counts live in the engine as atomic counters: the Collector reads
// them through [observer.StatsReader] when it is scraped, so a pipeline that
// fails nothing pays nothing per item for being measured. Only the figures
// that the counters do not hold (exhausted retries and the retry delay
// histogram) are taken from events.
//
//	c := prometheus.New()
//	b := pipeline.New("orders", pipeline.WithObserver(c))
//	// ... add nodes ...
//	p, err := b.Build() // the Collector now reads p's counters
//	registry.MustRegister(c)
//
// The metric names, types and labels are listed in docs/observability.md.
package prometheus

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	promclient "github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/same"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// The names of the metrics a Collector exports.
const (
	ItemsIn          = "sluice_items_in_total"
	ItemsOut         = "sluice_items_out_total"
	ItemsFailed      = "sluice_items_failed_total"
	ItemsFiltered    = "sluice_items_filtered_total"
	DeadLetters      = "sluice_dead_letters_total"
	Drops            = "sluice_drops_total"
	Retries          = "sluice_retries_total"
	RetriesExhausted = "sluice_retries_exhausted_total"
	RetryDelay       = "sluice_retry_delay_seconds"
	CircuitState     = "sluice_circuit_state"
	ItemsInFlight    = "sluice_items_in_flight"
	Fallbacks        = "sluice_fallbacks_total"
	BrokerRetries    = "sluice_broker_retries_total"
	HandedOff        = "sluice_handed_off_total"
	LateItems        = "sluice_late_items_total"
)

// An Option configures a Collector.
type Option func(*config)

type config struct {
	buckets []float64
}

// WithDelayBuckets sets the upper bounds, in seconds and strictly
// increasing, of the buckets of the retry delay histogram. The default is
// [observer.DelayBuckets]: 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,
// 2.5, 5, 10, 30, 60 and 300.
func WithDelayBuckets(bounds ...float64) Option {
	return func(c *config) { c.buckets = slices.Clone(bounds) }
}

// A Collector exports the metrics of the pipelines it observes. Give it to
// pipeline.WithObserver when building each pipeline (Build hands it the
// pipeline's counters, see [Collector.UseStats]), and register it on a
// registry. Several pipelines may share one Collector; their series differ
// by the pipeline label.
//
// A Collector is safe for concurrent use. Create one with [New].
type Collector struct {
	mu       sync.RWMutex
	observed []observer.StatsReader
	byName   map[string]observer.StatsReader
	// forgotten holds the names ForgetStats let go of, until UseStats
	// takes one again: their late events are not counted, or their
	// series would come back with no one to remove them.
	forgotten map[string]bool
	exhausted *promclient.CounterVec
	delay     *promclient.HistogramVec

	in, out, failed, filtered, deadLetters, drops, retries, circuit, inFlight, fallbacks *promclient.Desc
	brokerRetries, handedOff, late                                                       *promclient.Desc
}

// New returns a Collector that observes no pipeline yet.
func New(opts ...Option) *Collector {
	cfg := config{buckets: observer.DelayBuckets()}
	for _, o := range opts {
		o(&cfg)
	}
	node := []string{"pipeline", "node"}
	kind := []string{"pipeline", "node", "kind"}
	return &Collector{
		byName:    make(map[string]observer.StatsReader),
		forgotten: make(map[string]bool),
		exhausted: promclient.NewCounterVec(promclient.CounterOpts{
			Name: RetriesExhausted,
			Help: "Times a resilience layer of a node ran out of retries, by layer (kind) and by what ended them (limit): count, elapsed, budget.",
		}, append(slices.Clone(kind), "limit")),
		delay: promclient.NewHistogramVec(promclient.HistogramOpts{
			Name:    RetryDelay,
			Help:    "Delays chosen before retries, jitter included, in seconds, by layer (kind).",
			Buckets: cfg.buckets,
		}, kind),
		in:          promclient.NewDesc(ItemsIn, "Items a node took in from its input.", node, nil),
		out:         promclient.NewDesc(ItemsOut, "Items a node handed downstream; for a sink, items written.", node, nil),
		failed:      promclient.NewDesc(ItemsFailed, "Items whose processing failed after item retries, whatever happened to them next, except those a Fallback rescued.", node, nil),
		filtered:    promclient.NewDesc(ItemsFiltered, "Items a filter dropped, or a flat map or unbatch turned into nothing.", node, nil),
		deadLetters: promclient.NewDesc(DeadLetters, "Items a node sent to the dead-letter sink, which stored them.", node, nil),
		brokerRetries: promclient.NewDesc(BrokerRetries,
			"Items a node sent to the dead-letter sink, which gave them back to their broker's retry path instead of storing them: not dead letters.", node, nil),
		late:      promclient.NewDesc(LateItems, "Items an event-time Aggregate or Join took in behind its watermark (less an Aggregate's allowed lateness): too late for their windows or partners.", node, nil),
		handedOff: promclient.NewDesc(HandedOff, "Items whose item retry a node handed to their source's broker, to be delivered again after the wait.", node, nil),
		drops:     promclient.NewDesc(Drops, "Items a node dropped because its failure action is skip.", node, nil),
		fallbacks: promclient.NewDesc(Fallbacks, "Items a node's Fallback rescued after its item retries gave up.", node, nil),
		retries:   promclient.NewDesc(Retries, "Retries a node made, by layer (kind): item_retry, node_restart, node_retry.", kind, nil),
		circuit:   promclient.NewDesc(CircuitState, "State of a node's circuit breaker: 0 closed (also without a breaker), 1 open, 2 half-open.", node, nil),
		inFlight: promclient.NewDesc(ItemsInFlight,
			"Items a transform, sink, filter, merge or route (and each of its branches) took in during the current run and has not yet handed on, written, filtered, skipped, dead-lettered, given back to its broker or handed off; 0 while the pipeline is not running.", node, nil),
	}
}

// UseStats makes the Collector report the counters r reads at every
// scrape; pipeline.Builder.Build calls it with each pipeline built with
// the Collector. Observing the same pipeline again does nothing;
// observing another pipeline of the same name is an error, which fails the
// Build, since their series could not be told apart.
func (c *Collector) UseStats(r observer.StatsReader) error {
	if r == nil {
		return errors.New("prometheus: UseStats: nil reader")
	}
	s := r.Stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.byName[s.Pipeline]; ok {
		if same.Is(q, r) {
			return nil
		}
		return fmt.Errorf("prometheus: a pipeline named %q is already observed", s.Pipeline)
	}
	c.observed = append(c.observed, r)
	c.byName[s.Pipeline] = r
	delete(c.forgotten, s.Pipeline)
	// Exhaustion counters start at zero, so that the first exhaustion is
	// an increase that rate() can see; only those that can move, so that
	// a dashboard is not filled with series that stay at zero. Another
	// appears when it moves.
	for _, n := range s.Nodes {
		for _, k := range kinds {
			for _, l := range limits {
				if n.Exhaustible.Has(k, l) {
					c.exhausted.WithLabelValues(s.Pipeline, n.Node, k.String(), l.String())
				}
			}
		}
	}
	return nil
}

// ForgetStats lets go of a pipeline that UseStats took: its series are no
// longer exported, and its name may be observed again. Multi calls it when
// a Build fails after the Collector took the pipeline.
func (c *Collector) ForgetStats(r observer.StatsReader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, q := range c.byName {
		if !same.Is(q, r) {
			continue
		}
		delete(c.byName, name)
		c.forgotten[name] = true
		c.observed = slices.DeleteFunc(c.observed, func(o observer.StatsReader) bool { return same.Is(o, r) })
		c.exhausted.DeletePartialMatch(promclient.Labels{"pipeline": name})
		c.delay.DeletePartialMatch(promclient.Labels{"pipeline": name})
	}
}

var (
	kinds  = resilience.RetryKinds()
	limits = resilience.Limits()
)

// Describe sends the descriptions of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *promclient.Desc) {
	for _, d := range []*promclient.Desc{c.in, c.out, c.failed, c.filtered, c.deadLetters, c.drops, c.retries, c.circuit, c.inFlight, c.fallbacks, c.brokerRetries, c.handedOff, c.late} {
		ch <- d
	}
	c.exhausted.Describe(ch)
	c.delay.Describe(ch)
}

// Collect reads the counters of every observed pipeline and sends them,
// with the figures gathered from events.
func (c *Collector) Collect(ch chan<- promclient.Metric) {
	c.mu.RLock()
	ps := slices.Clone(c.observed)
	c.mu.RUnlock()
	for _, p := range ps {
		s := p.Stats()
		for _, n := range s.Nodes {
			pl, nd := s.Pipeline, n.Node
			counter := func(d *promclient.Desc, v int64) {
				ch <- promclient.MustNewConstMetric(d, promclient.CounterValue, float64(v), pl, nd)
			}
			counter(c.in, n.In)
			counter(c.out, n.Out)
			counter(c.failed, n.Failed)
			counter(c.filtered, n.Filtered)
			counter(c.deadLetters, n.DeadLettered)
			counter(c.drops, n.Skipped)
			counter(c.fallbacks, n.Fallbacks)
			// Only nodes whose items go back to a broker: a series that
			// appears with its first count, rather than one at zero for
			// every node of every pipeline.
			if n.BrokerRetries != 0 {
				counter(c.brokerRetries, n.BrokerRetries)
			}
			if n.HandedOff != 0 {
				counter(c.handedOff, n.HandedOff)
			}
			if n.Late != 0 {
				counter(c.late, n.Late)
			}
			for _, k := range kinds {
				ch <- promclient.MustNewConstMetric(c.retries, promclient.CounterValue, float64(n.Retries(k)), pl, nd, k.String())
			}
			ch <- promclient.MustNewConstMetric(c.circuit, promclient.GaugeValue, float64(n.Circuit), pl, nd)
			if n.HasInFlight() {
				ch <- promclient.MustNewConstMetric(c.inFlight, promclient.GaugeValue, float64(n.InFlight), pl, nd)
			}
		}
	}
	c.exhausted.Collect(ch)
	c.delay.Collect(ch)
}

// OnNodeStarted does nothing: the items in flight are in the pipeline's
// Stats.
func (c *Collector) OnNodeStarted(observer.NodeEvent) {}

// OnNodeCompleted does nothing: a node's counts are in its counters.
func (c *Collector) OnNodeCompleted(observer.NodeEvent) {}

// OnRetry records the delay chosen in the retry delay histogram. The
// retry itself is counted by the engine.
// An event of a pipeline that ForgetStats let go of is not recorded.
func (c *Collector) OnRetry(e observer.RetryEvent) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.forgotten[e.Pipeline] {
		c.delay.WithLabelValues(e.Pipeline, e.Node, e.Kind.String()).Observe(e.Delay.Seconds())
	}
}

// OnRetryExhausted counts the exhaustion, unless ForgetStats let go of
// its pipeline.
func (c *Collector) OnRetryExhausted(e observer.RetryExhaustedEvent) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.forgotten[e.Pipeline] {
		c.exhausted.WithLabelValues(e.Pipeline, e.Node, e.Kind.String(), e.Limit.String()).Inc()
	}
}

// OnDeadLetter does nothing: dead letters are counted by the engine.
func (c *Collector) OnDeadLetter(observer.DeadLetterEvent) {}

// OnDrop does nothing: drops are counted by the engine.
func (c *Collector) OnDrop(observer.DropEvent) {}

// OnCircuitStateChanged does nothing: the state is read at scrape time.
func (c *Collector) OnCircuitStateChanged(observer.CircuitEvent) {}

var (
	_ promclient.Collector = (*Collector)(nil)
	_ observer.StatsUser   = (*Collector)(nil)
)
