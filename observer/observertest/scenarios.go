package observertest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errFlaky = resilience.MarkTransient(errors.New("observertest: flaky dependency"))
	errBad   = errors.New("observertest: bad item")
	errDown  = errors.New("observertest: connection lost")
)

// A scenario is one scripted pipeline and the events it must cause.
type scenario struct {
	name  string // also the pipeline's name
	opts  []pipeline.Option
	nodes func(b *pipeline.Builder) // adds the nodes
	step  time.Duration             // how far the clock moves each time the run waits on it
	fails bool                      // the run must fail
	want  Counts                    // without node lifecycle, which every node adds
}

// Every scenario's pipeline name starts with this.
const prefix = "observertest-"

// policy starts from the default profile with every layer off and no
// jitter, then applies f, so that each scenario's events are exact.
func policy(f func(o *resilience.Options)) func(*resilience.Options) {
	return func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
		o.NodeRestart.MaxRestarts = 0
		o.NodeRetry.MaxRetries = 0
		f(o)
	}
}

func ints(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// counts builds the expected counts of the pipeline called name.
type counts struct {
	name string
	c    Counts
}

func (c counts) add(ev Event, node, detail string, n int) counts {
	c.c.Add(Key{Event: ev, Pipeline: c.name, Node: node, Detail: detail}, n)
	return c
}

func expect(name string) counts { return counts{name: name, c: make(Counts)} }

const (
	itemRetry   = "item_retry"
	nodeRestart = "node_restart"
	nodeRetry   = "node_retry"
)

// scenarios returns fresh scenarios: their faults keep state, so each Run
// needs its own.
func scenarios() []scenario {
	return []scenario{
		retries(), skips(), deadLetters(), breaker(), restart(), nodeRetries(), failure(),
	}
}

// retries: items fail a few times on four parallel workers and then pass.
func retries() scenario {
	name := prefix + "retries"
	faults := pipelinetest.NewFaults(map[int][]error{
		3: {errFlaky, errFlaky}, 7: {errFlaky}, 11: {errFlaky, errFlaky, errFlaky}, 15: {errFlaky},
	})
	return scenario{
		name: name,
		opts: []pipeline.Option{pipeline.WithResilience(policy(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 3 }))},
		nodes: func(b *pipeline.Builder) {
			out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(40)...)),
				faults, pipeline.Parallel(4))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
		step: time.Second,
		want: expect(name).add(Retry, "call", itemRetry, 7).c,
	}
}

// skips: retries run out and the items are skipped, on two unordered
// workers; a permanent error is skipped without retries.
func skips() scenario {
	name := prefix + "skips"
	return scenario{
		name: name,
		opts: []pipeline.Option{pipeline.WithResilience(policy(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))},
		nodes: func(b *pipeline.Builder) {
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(20)...))
			retried := pipeline.Transform[int, int](b, "retried", src, pipelinetest.FailAlways(errFlaky, 2, 5, 13),
				pipeline.Parallel(2), pipeline.Unordered(),
				pipeline.NodeResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 2 }))
			bad := pipeline.Transform[int, int](b, "bad", retried, pipelinetest.FailAlways(errBad, 7))
			pipeline.Sink(b, "sink", bad, &pipelinetest.Collector[int]{})
		},
		step: time.Second,
		want: expect(name).
			add(Retry, "retried", itemRetry, 6).
			add(RetryExhausted, "retried", itemRetry, 3).
			add(Drop, "retried", "", 3).
			add(Drop, "bad", "", 1).c,
	}
}

// deadLetters: retries run out and the items go to the dead-letter sink.
func deadLetters() scenario {
	name := prefix + "dead-letters"
	return scenario{
		name: name,
		opts: []pipeline.Option{
			pipeline.WithDeadLetter(deadletter.NewMemory(10)),
			pipeline.WithResilience(policy(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 1
				o.OnItemFailure = resilience.DeadLetter
			})),
		},
		nodes: func(b *pipeline.Builder) {
			out := pipeline.Transform[int, int](b, "dead", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)),
				pipelinetest.FailAlways(errFlaky, 4, 8), pipeline.Parallel(2))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
		step: time.Second,
		want: expect(name).
			add(Retry, "dead", itemRetry, 2).
			add(RetryExhausted, "dead", itemRetry, 2).
			add(DeadLetter, "dead", "", 2).c,
	}
}

// breaker: three failures open the breaker; the node pauses until it
// half-opens, and the probe closes it.
func breaker() scenario {
	name := prefix + "breaker"
	return scenario{
		name: name,
		opts: []pipeline.Option{pipeline.WithResilience(policy(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 3
			o.CircuitBreaker.OpenDuration = 10 * time.Second
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
			o.CircuitBreaker.MaxPause = time.Minute
		}))},
		nodes: func(b *pipeline.Builder) {
			out := pipeline.Transform[int, int](b, "guarded", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)),
				pipelinetest.FailAlways(errFlaky, 0, 1, 2))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
		step: 10 * time.Second,
		want: expect(name).
			add(Drop, "guarded", "", 3).
			add(CircuitStateChanged, "guarded", resilience.CircuitOpen.String(), 1).
			add(CircuitStateChanged, "guarded", resilience.CircuitHalfOpen.String(), 1).
			add(CircuitStateChanged, "guarded", resilience.CircuitClosed.String(), 1).c,
	}
}

// restart: an item fails the node, which restarts and replays it.
func restart() scenario {
	name := prefix + "restart"
	return scenario{
		name: name,
		opts: []pipeline.Option{pipeline.WithResilience(policy(func(o *resilience.Options) {
			o.NodeRestart.MaxRestarts = 2
			o.NodeRestart.Backoff = resilience.Constant(time.Second)
		}))},
		nodes: func(b *pipeline.Builder) {
			out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(20)...)),
				pipelinetest.NewFaults(map[int][]error{6: {errDown}}))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
		step: time.Second,
		want: expect(name).add(Retry, "call", nodeRestart, 1).c,
	}
}

// nodeRetries: a source fails before emitting anything and is run again.
func nodeRetries() scenario {
	name := prefix + "node-retry"
	var runs atomic.Int32
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if runs.Add(1) == 1 {
			return errFlaky
		}
		for _, v := range ints(5) {
			if err := out.Emit(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	return scenario{
		name: name,
		opts: []pipeline.Option{pipeline.WithResilience(policy(func(o *resilience.Options) {
			o.NodeRetry.MaxRetries = 2
			o.NodeRetry.Backoff = resilience.Constant(5 * time.Second)
		}))},
		nodes: func(b *pipeline.Builder) {
			pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), &pipelinetest.Collector[int]{})
		},
		step: 5 * time.Second,
		want: expect(name).add(Retry, "src", nodeRetry, 1).c,
	}
}

// failure: item retries inside node restarts run out and the run fails;
// every node still completes, with an error.
func failure() scenario {
	name := prefix + "failure"
	return scenario{
		name: name,
		opts: []pipeline.Option{pipeline.WithResilience(policy(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.Backoff = resilience.Constant(time.Minute)
		}))},
		nodes: func(b *pipeline.Builder) {
			out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...)),
				pipelinetest.FailAlways(errFlaky, 3))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
		step:  time.Minute,
		fails: true,
		want: expect(name).
			add(Retry, "call", itemRetry, 2).
			add(RetryExhausted, "call", itemRetry, 2).
			add(Retry, "call", nodeRestart, 1).
			add(RetryExhausted, "call", nodeRestart, 1).c,
	}
}
