package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// The defaults of the channel sizes. They document what a pipeline uses
// when no option says otherwise; changing them is done per pipeline, with
// [WithBuffer], [Buffer] and [WithHandOverBatch], not here.
const (
	// DefaultBuffer is the capacity of the channel in front of each node,
	// in items; WithBuffer and Buffer set it.
	DefaultBuffer = 64
	// HighThroughputBuffer is DefaultBuffer under
	// [resilience.ProfileHighThroughput].
	HighThroughputBuffer = 1024
	// DefaultHandOverBatch is the most items a stage gathers before it
	// hands them over; WithHandOverBatch sets it.
	DefaultHandOverBatch = 64
	// HighThroughputHandOverBatch is DefaultHandOverBatch under
	// [resilience.ProfileHighThroughput].
	HighThroughputHandOverBatch = 256
)

// An Option configures a pipeline.
type Option func(*config)

type config struct {
	profile    resilience.Profile
	resilience []func(*resilience.Options)
	observer   observer.Observer
	deadLetter deadletter.Sink
	dlRetry    deadLetterRetry
	clock      clockwork.Clock
	rand       resilience.Rand
	buffer     int
	bufferSet  bool // else the profile's
	handOver   int  // -1: the profile's
	// drainTimeout bounds a drain (WithDrainTimeout); 0: none.
	drainTimeout time.Duration
	// checkpoint and checkpointEvery are WithCheckpoint's; nil: none.
	checkpoint      checkpoint.Store
	checkpointEvery time.Duration
	checkpointSet   bool
}

// WithProfile starts the pipeline from a profile: its resilience options
// and, for [resilience.ProfileHighThroughput], larger buffers and batched
// hand-over between stages. The default is [resilience.ProfileDefault].
func WithProfile(p resilience.Profile) Option {
	return func(c *config) { c.profile = p }
}

// WithResilience changes the resilience options every node starts from.
// Functions given by several WithResilience options run in order, after
// the profile's options are set.
func WithResilience(f func(*resilience.Options)) Option {
	return func(c *config) { c.resilience = append(c.resilience, f) }
}

// WithObserver sends the pipeline's events to obs. Use [observer.Multi] for
// several observers.
func WithObserver(obs observer.Observer) Option {
	return func(c *config) { c.observer = obs }
}

// WithDeadLetter sets the sink of items whose node says
// [resilience.DeadLetter]. Without one, a node with that action fails Build.
func WithDeadLetter(s deadletter.Sink) Option {
	return func(c *config) { c.deadLetter = s }
}

// WithDeadLetterRetry sets how often and with which backoff a failing write
// to the dead-letter sink is retried before the run fails. The default is 5
// retries, exponential from 100 ms up to 5 s.
func WithDeadLetterRetry(maxRetries int, b resilience.Backoff) Option {
	return func(c *config) { c.dlRetry = deadLetterRetry{maxRetries: maxRetries, backoff: b, set: true} }
}

type deadLetterRetry struct {
	maxRetries int
	backoff    resilience.Backoff
	set        bool
}

// WithClock sets the clock every wait of the pipeline uses: backoffs,
// batch linger, breaker timing and event times. Tests give a
// [clockwork.FakeClock]. The default is the real clock.
func WithClock(c clockwork.Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// WithRand sets the source of the jitter of every backoff of every layer,
// so that runs can be repeated exactly: two runs from sources seeded
// alike choose the same delays, in the same order. The draws are made in
// the order the retries happen, so retries that run at the same time
// (parallel workers, several nodes retrying at once) may take them in
// another order from run to run. The pipeline serialises its calls to r.
func WithRand(r resilience.Rand) Option {
	return func(c *config) { c.rand = r }
}

// WithBuffer sets the capacity of the channel in front of each node, in
// items. With batched hand-over the channel holds buffer / batch batches,
// at least two; with WithHandOverBatch(1), 0 makes every hand-over
// synchronous.
func WithBuffer(n int) Option {
	return func(c *config) { c.buffer, c.bufferSet = n, true }
}

// WithHandOverBatch sets the most items a stage gathers before handing them
// to the next in one channel operation: [DefaultHandOverBatch] by default,
// [HighThroughputHandOverBatch] under the high-throughput profile. A stage
// hands over early when its own input runs dry and when an item is tracked,
// and the run's flusher hands over what an idle source left after 500 µs,
// so light load keeps its latency low. 1 hands every item over alone, which
// costs about four times more per item than the default, about twice as
// much as plain channels (see docs/performance.md).
func WithHandOverBatch(n int) Option {
	return func(c *config) { c.handOver = n }
}

// A NodeOption configures one node.
type NodeOption func(*nodeConfig)

type nodeConfig struct {
	parallel  int
	unordered bool
	// keyed is the Keyed option's key function (a laneMaker), or the
	// error it found; keyedN the workers it asked for.
	keyed  any
	keyedN int
	// parallelSet: Parallel was given (Keyed refuses it).
	parallelSet bool
	// withKey is the SourceKey option's func(T) string, or the error it
	// found; checked by Source.
	withKey any
	// withTrace is the SourceTraceHeaders option's func(T) map[string]string,
	// or the error it found; checked by Source.
	withTrace  any
	buffer     int // -1: the pipeline's
	resilience []func(*resilience.Options)
	// fallback is the Fallback function, checked by the node's kind.
	fallback any
	// RateLimit: calls per second and burst, when limited.
	rate    float64
	burst   int
	limited bool
	// MaxParked: the cap on parked items, when given.
	maxParked    int
	maxParkedSet bool
	// reuseSlice: ReuseSlice was given.
	reuseSlice bool
	// EventTime, AllowedLateness and Late (eventtime.go), checked by
	// Aggregate and refused elsewhere.
	eventTime       *eventTimeConfig
	allowedLateness time.Duration
	allowedSet      bool
	late            *lateOutput
	// JoinEventTime and JoinLate (jointime.go), checked by Join and
	// refused elsewhere.
	joinTime *joinTimeConfig
	joinLate *joinLateOutput
	// refused are the problems Refuse gave, for Build.
	refused []error
}

// Parallel runs the node's work on n goroutines. Output keeps the input's
// order unless [Unordered] is given as well. n must be at least 1. With n
// above 1, an item whose retry waits parks (see [MaxParked]) and its
// worker goes on with later items; an ordered node holds their results
// in its reorder window, at most four times MaxParked items (4096 by
// default), and reads no more input while the window is full.
func Parallel(n int) NodeOption {
	return func(c *nodeConfig) { c.parallel, c.parallelSet = n, true }
}

// Unordered lets a parallel node hand over each output as soon as it is
// ready, instead of in input order.
func Unordered() NodeOption {
	return func(c *nodeConfig) { c.unordered = true }
}

// Buffer sets the capacity of the channel in front of this node, in items.
func Buffer(n int) NodeOption {
	return func(c *nodeConfig) { c.buffer = n }
}

// NodeResilience changes this node's resilience options, after the
// pipeline's.
func NodeResilience(f func(*resilience.Options)) NodeOption {
	return func(c *nodeConfig) { c.resilience = append(c.resilience, f) }
}

// SourceKey gives every item a source emits a correlation key, key(item),
// such as an order's ID. The key goes with the item and everything derived
// from it through every node: it is the Key of the events about it
// (observer.RetryEvent, RetryExhaustedEvent, DeadLetterEvent, DropEvent),
// which the log plug-in writes, and the CorrelationID of its dead-letter
// envelope when the item at the node that failed it has none of its own
// (deadletter.Correlated). An item of a batch, window or join is named by
// the first keyed item it holds ("ord-7 and 499 more").
//
// SourceKey is a Source option; T must be the source's item type. key runs
// once per item, on the source's Emit; a panic in it fails the source. An
// item that carries a key costs a small allocation, which an untracked
// item does not otherwise have.
func SourceKey[T any](key func(T) string) NodeOption {
	return func(c *nodeConfig) {
		if key == nil {
			c.withKey = errors.New("SourceKey: the key function is nil")
			return
		}
		c.withKey = key
	}
}

// SourceTraceHeaders gives each item of a source the trace context it
// arrived with, such as a message's W3C traceparent and tracestate
// headers: headers returns them for one item (nil: none). When the run
// traces (observer.WithTracer), every attempt on the item, or on anything
// derived from it, gets them in observer.Attempt.Links, and the
// OpenTelemetry tracer links its span to that trace; an attempt on a
// batch or window gets one set per item that has one.
//
// SourceTraceHeaders is a Source option; T must be the source's item type.
// headers runs once per item, on the source's Emit, and only when the run
// traces: without a tracer it costs nothing. A panic in it fails the run.
// The map must not change afterwards. An item that carries headers costs
// a small allocation, as with SourceKey.
func SourceTraceHeaders[T any](headers func(T) map[string]string) NodeOption {
	return func(c *nodeConfig) {
		if headers == nil {
			c.withTrace = errors.New("SourceTraceHeaders: the headers function is nil")
			return
		}
		c.withTrace = headers
	}
}

// lockedRand serialises a Rand that is not safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  resilience.Rand
}

func (l *lockedRand) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

// globalRand draws from math/rand/v2's top-level source.
type globalRand struct{}

func (globalRand) Int64N(n int64) int64 { return rand.Int64N(n) }

// Fallback gives a Transform a last resort for an item that its layer 1
// gave up on (retries exhausted, a permanent error, an open breaker): f
// gets the item and the error, and what it returns is the item's result,
// handed on as if the call had succeeded (a cached price, a default, a
// second service). An error from f joins the item's error, for the
// failure action. f is tried once per attempt, not on the echo of a
// cancelled run; it is the user's code, under the panic guard, and it must
// be safe for concurrent use under Parallel. The node's counts show the
// items it rescued (NodeStats.Fallbacks).
//
// In and Out must be the Transform's types: another function is a Build
// error naming the node.
func Fallback[In, Out any](f func(ctx context.Context, in In, err error) (Out, error)) NodeOption {
	return func(c *nodeConfig) {
		if f == nil {
			c.fallback = errNilFallback
			return
		}
		c.fallback = f
	}
}

var errNilFallback = errors.New("Fallback: the function is nil")
