package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// ballast gives ctx n children that each start a goroutine when ctx is
// cancelled. A run cancels its nodes' contexts one after the other, each
// with its children: ballast on one node's context holds back the nodes
// after it, while the goroutines it starts crowd the cancelling goroutine's
// run queue and push the run's own watcher of its context, started before
// them, onto another processor. The engine's goroutines then run in the
// middle of the cancellation, as they may on a loaded machine, instead of
// only after it. The children go when the run cancels ctx at its end.
func ballast(ctx context.Context, n int) {
	for range n {
		context.AfterFunc(ctx, func() {})
	}
}

// A drainSink writes items while the caller cancels the run. Its write
// number at waits for after (unless nil), closes reached and waits until
// caller is done, without watching its own context; from then on it yields
// before each write, so that the run's goroutines interleave with the
// cancellation. It counts writes and flushes.
type drainSink struct {
	caller  context.Context
	at      int64
	after   <-chan struct{}
	reached chan struct{}
	writes  atomic.Int64
	flushes atomic.Int64
}

func newDrainSink(caller context.Context, at int64, after <-chan struct{}) *drainSink {
	return &drainSink{caller: caller, at: at, after: after, reached: make(chan struct{})}
}

func (s *drainSink) Write(_ context.Context, _ int) error {
	if s.writes.Load()+1 == s.at {
		if s.after != nil {
			<-s.after
		}
		close(s.reached)
		<-s.caller.Done()
	}
	if s.caller.Err() != nil {
		runtime.Gosched()
	}
	s.writes.Add(1)
	return nil
}

func (s *drainSink) Flush(context.Context) error {
	s.flushes.Add(1)
	return nil
}

// completions is an observer that records, by node, the error each node
// completed with; srcDone, unless nil, is closed when the node "src"
// completes.
type completions struct {
	observer.Nop
	mu      sync.Mutex
	errs    map[string][]error
	srcDone chan struct{}
}

func (c *completions) OnNodeCompleted(e observer.NodeEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errs == nil {
		c.errs = make(map[string][]error)
	}
	c.errs[e.Node] = append(c.errs[e.Node], e.Err)
	if e.Node == "src" && c.srcDone != nil {
		close(c.srcDone)
	}
}

// clean returns the nodes that completed without an error.
func (c *completions) clean() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name, errs := range c.errs {
		for _, err := range errs {
			if err == nil {
				names = append(names, name)
			}
		}
	}
	return names
}

// emitForever is a source that never ends on its own: it emits until Emit
// fails. It gives its context ballast.
func emitForever() node.Source[int] {
	return node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		ballast(ctx, ballastN)
		for i := 0; ; i++ {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
	})
}

// emitN is a source that emits 0 to n-1 and returns nil. It gives its
// context ballast, which stays after it returned.
func emitN(n int) node.Source[int] {
	return node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		ballast(ctx, ballastN)
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	})
}

// cancelRuns is how many cancelled runs a test makes in each mode; ballastN
// how many children ballast gives a source's context.
const (
	cancelRuns = 100
	ballastN   = 300
)

// errCallerStopped is the cause with which the callers of the tests below
// cancel their runs.
var errCallerStopped = errors.New("caller stopped the run")

// runCancelled runs p under caller, cancels caller with errCallerStopped
// once sink reached its write, and returns what Run returned.
func runCancelled(t *testing.T, p *pipeline.Pipeline, caller context.Context, cancel context.CancelCauseFunc, sink *drainSink) error {
	t.Helper()
	r := pipelinetest.Start(caller, p)
	select {
	case <-sink.reached:
	case <-r.Done():
		_, err := r.Wait()
		require.FailNow(t, "the run ended before the caller could cancel it", "Run returned %v", err)
	}
	cancel(errCallerStopped)
	_, err := r.Wait()
	return err
}

// A run whose caller cancels it while its source still emits must not end
// as if its input ended: no sink is flushed, no node completes without an
// error, and Run returns the cancellation's cause.
//
// The tests of a cancellation's timing do not run in parallel with the
// package's other tests: their load would leave the run's goroutines too
// little room to run in the middle of the cancellation.
func TestCancelledRunNeverLooksLikeTheEndOfInput(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for run := range cancelRuns {
				caller, cancel := context.WithCancelCause(t.Context())
				obs := &completions{}
				b := pipeline.New("never-ends", append([]pipeline.Option{pipeline.WithObserver(obs)}, m.opts...)...)
				src := pipeline.Source(b, "src", emitForever())
				sink := newDrainSink(caller, 100, nil)
				pipeline.Sink[int](b, "sink", src, sink)
				err := runCancelled(t, build(t, b), caller, cancel, sink)
				require.Zero(t, sink.flushes.Load(), "run %d: the sink of a cancelled run was flushed", run)
				require.Empty(t, obs.clean(), "run %d: nodes completed without an error in a cancelled run", run)
				require.ErrorIs(t, err, errCallerStopped, "run %d", run)
			}
		})
	}
}

// A run whose source ended, cancelled while its sink still writes, must not
// succeed unless every item was written: the sink's reader must not take
// the cancellation for the end of its input, flush the sink and report
// success with items left unwritten. (It runs alone: see above.)
func TestCancelledDrainNeverSucceedsWithItemsUnwritten(t *testing.T) {
	const items = 300
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for run := range cancelRuns {
				caller, cancel := context.WithCancelCause(t.Context())
				obs := &completions{srcDone: make(chan struct{})}
				b := pipeline.New("drain", append([]pipeline.Option{pipeline.WithObserver(obs)}, m.opts...)...)
				src := pipeline.Source(b, "src", emitN(items))
				// The sink's channel holds every item, and the sink waits
				// for the source to complete before the caller cancels.
				sink := newDrainSink(caller, 20, obs.srcDone)
				pipeline.Sink[int](b, "sink", src, sink, pipeline.Buffer(2*items))
				err := runCancelled(t, build(t, b), caller, cancel, sink)
				written := sink.writes.Load()
				if written == items {
					continue // the sink wrote everything before it heard of the cancellation
				}
				require.ErrorIs(t, err, errCallerStopped, "run %d: Run did not return the cancellation with %d of %d items written", run, written, items)
				require.Zero(t, sink.flushes.Load(), "run %d: the sink was flushed with %d of %d items written", run, written, items)
				require.NotContains(t, obs.clean(), "sink", "run %d: the sink completed without an error with %d of %d items written", run, written, items)
			}
		})
	}
}

// doneOnWait is a context that is done the moment anyone waits on it, that
// is, calls Done: like a deadline that expires while an Emit given it waits
// for room downstream, without the real clock. Until then it is its
// parent.
type doneOnWait struct {
	context.Context
	once   sync.Once
	cancel context.CancelFunc
}

func newDoneOnWait(parent context.Context) *doneOnWait {
	ctx, cancel := context.WithCancel(parent)
	return &doneOnWait{Context: ctx, cancel: cancel}
}

func (c *doneOnWait) Done() <-chan struct{} {
	c.once.Do(c.cancel)
	return c.Context.Done()
}

// emitLedger records, for a source's items, what Emit returned and the
// outcomes their done callbacks reported.
type emitLedger struct {
	mu       sync.Mutex
	ok       []int
	failed   []int
	outcomes map[int][]node.Outcome
}

func (l *emitLedger) emitted(i int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed = append(l.failed, i)
	} else {
		l.ok = append(l.ok, i)
	}
}

func (l *emitLedger) done(i int) func(node.Outcome) {
	return func(o node.Outcome) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.outcomes == nil {
			l.outcomes = make(map[int][]node.Outcome)
		}
		l.outcomes[i] = append(l.outcomes[i], o)
	}
}

// The context a source passes to Emit or EmitTracked governs that call
// only. A call that fails because its context is done while it waits for
// room hands nothing downstream: the sink never writes its item, and a
// tracked item's done says Failed, once. Every item whose call returned nil
// is written. A source that handles the failure, then goes on with its own
// context or returns nil, has a run that succeeds: the failed call's
// context is not watched by later sends, the source's final hand-over
// included.
func TestEmitContextGovernsOnlyItsCall(t *testing.T) {
	t.Parallel()
	const items = 400
	for _, tracked := range []bool{false, true} {
		for _, returns := range []bool{false, true} {
			for _, m := range modes {
				for _, sinks := range []int{1, 2} {
					then := map[bool]string{false: "goes-on", true: "returns"}[returns]
					name := fmt.Sprintf("tracked=%t/%s/%s/sinks=%d", tracked, then, m.name, sinks)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						// The sink holds its first item until a call failed.
						gate := make(chan struct{})
						var opened sync.Once
						open := func() { opened.Do(func() { close(gate) }) }
						var ledger emitLedger
						b := pipeline.New("emit-ctx", append([]pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
							o.NodeRetry.MaxRetries = 0
						})}, m.opts...)...)
						src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
							defer open()
							failed := false
							for i := range items {
								// Until one fails, every call gets a context of
								// its own, done if the call has to wait. Later
								// calls use the source's context.
								call := ctx
								if !failed {
									call = newDoneOnWait(ctx)
								}
								var err error
								if tracked {
									err = out.EmitTracked(call, i, ledger.done(i))
								} else {
									err = out.Emit(call, i)
								}
								ledger.emitted(i, err)
								if err == nil {
									continue
								}
								if failed || ctx.Err() != nil {
									return err // not the case under test
								}
								failed = true
								open()
								if returns {
									return nil
								}
							}
							return nil
						}))
						// With two sinks the stream is broadcast: an item goes
						// to both branches or to neither.
						var mu sync.Mutex
						written := map[int]int{}
						for k := range sinks {
							var first sync.Once
							pipeline.Sink(b, fmt.Sprintf("sink%d", k), src, node.SinkFunc[int](func(ctx context.Context, x int) error {
								first.Do(func() {
									select {
									case <-gate:
									case <-ctx.Done():
									}
								})
								mu.Lock()
								defer mu.Unlock()
								written[x]++
								return nil
							}))
						}
						_, err := build(t, b).Run(t.Context())
						ledger.mu.Lock()
						defer ledger.mu.Unlock()
						require.NotEmpty(t, ledger.failed, "no Emit had to wait: the test did not reach its case")
						assert.NoError(t, err, "the source handled its failed Emit and returned nil")
						var failedWritten, okLost []int
						for _, i := range ledger.failed {
							if written[i] != 0 {
								failedWritten = append(failedWritten, i)
							}
						}
						for _, i := range ledger.ok {
							if written[i] != sinks {
								okLost = append(okLost, i)
							}
						}
						assert.Empty(t, failedWritten, "items whose Emit failed but that the sink wrote")
						assert.Empty(t, okLost, "items whose Emit returned nil but that a sink did not write exactly once")
						if tracked {
							wrong := map[int][]node.Outcome{}
							for _, i := range ledger.failed {
								if o := ledger.outcomes[i]; !slices.Equal(o, []node.Outcome{node.Failed}) {
									wrong[i] = o
								}
							}
							for _, i := range ledger.ok {
								if o := ledger.outcomes[i]; !slices.Equal(o, []node.Outcome{node.Delivered}) && written[i] == sinks {
									wrong[i] = o
								}
							}
							assert.Empty(t, wrong, "outcomes other than Failed once for a failed EmitTracked, Delivered once for a written item")
						}
					})
				}
			}
		}
	}
}

// errOwn is the error a call returns of its own accord when its context is
// cancelled: a client's "bad connection", which does not wrap ctx.Err().
var errOwn = errors.New("bad connection")

// ownErrorOnCancel returns a function that, called on item at, tells
// entered and waits until its context is done, then fails with errOwn; it
// passes every other item.
func ownErrorOnCancel(at int, entered chan<- struct{}) func(context.Context, int) error {
	return func(ctx context.Context, x int) error {
		if x != at {
			return nil
		}
		entered <- struct{}{}
		<-ctx.Done()
		return errOwn
	}
}

// When the caller cancels a run, a transform or sink call that then fails
// with an error of its own is only an echo of the cancellation: the item is
// not retried, counted as failed, skipped or dead-lettered, and a tracked
// item ends Failed.
func TestCancellationIsNeverAnItemFailure(t *testing.T) {
	t.Parallel()
	const at = 5
	for _, action := range []resilience.FailureAction{resilience.DeadLetter, resilience.Skip} {
		for _, kind := range []string{"transform", "parallel-transform", "sink"} {
			for _, m := range modes {
				t.Run(fmt.Sprintf("%s/%s/%s", action, kind, m.name), func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					dlq := deadletter.NewMemory(100)
					rec := &pipelinetest.Recorder{}
					b := pipeline.New("cancel-own-error", append([]pipeline.Option{
						pipeline.WithObserver(rec),
						pipeline.WithDeadLetter(dlq),
						pipeline.WithClock(clockwork.NewFakeClock()),
						pipeline.WithResilience(func(o *resilience.Options) {
							o.ItemRetry.MaxRetries = 3
							o.ItemRetry.Backoff = resilience.NoBackoff()
							o.ItemRetry.Classifier = resilience.AllTransient()
							o.NodeRetry.MaxRetries = 0
							o.OnItemFailure = action
						}),
					}, m.opts...)...)
					src := pipelinetest.NewTrackedSource(ints(200)...)
					s := pipeline.Source[int](b, "src", src)
					entered := make(chan struct{}, 1)
					call := ownErrorOnCancel(at, entered)
					switch kind {
					case "sink":
						pipeline.Sink(b, "work", s, node.SinkFunc[int](call))
					default:
						var opts []pipeline.NodeOption
						if kind == "parallel-transform" {
							opts = append(opts, pipeline.Parallel(2))
						}
						s = pipeline.Transform(b, "work", s, node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
							return x, call(ctx, x)
						}), opts...)
						pipeline.Sink(b, "sink", s, &pipelinetest.Collector[int]{})
					}
					r := pipelinetest.Start(ctx, build(t, b))
					select {
					case <-entered:
					case <-r.Done():
						_, err := r.Wait()
						require.FailNow(t, "the run ended before the caller could cancel it", "Run returned %v", err)
					}
					cancel()
					res, err := r.Wait()
					require.ErrorIs(t, err, context.Canceled)
					st := nodeOf(t, res, "work")
					assert.Zero(t, st.Failed, "Failed")
					assert.Zero(t, st.Skipped, "Skipped")
					assert.Zero(t, st.DeadLettered, "DeadLettered")
					assert.Zero(t, st.ItemRetries, "ItemRetries")
					assert.Zero(t, dlq.Len(), "envelopes in the dead-letter sink")
					assert.Empty(t, pipelinetest.Of[observer.DeadLetterEvent](rec), "OnDeadLetter events")
					assert.Empty(t, pipelinetest.Of[observer.DropEvent](rec), "OnDrop events")
					assert.Empty(t, pipelinetest.Of[observer.RetryEvent](rec), "OnRetry events")
					assert.Equal(t, []node.Outcome{node.Failed}, src.Outcomes()[at], "outcome of the item in flight")
				})
			}
		}
	}
}

// When one worker of a parallel node fails the node, its siblings' calls
// in flight are cancelled; those that then fail with errors of their own
// are echoes of that failure, not failures of their items: the node counts
// one failed item.
func TestSiblingsOfAFailingItemAreNotFailures(t *testing.T) {
	t.Parallel()
	const workers = 4
	errBoom := errors.New("boom")
	variants := []struct {
		name string
		opts []pipeline.NodeOption
		sink bool
	}{
		{"ordered", nil, false},
		{"unordered", []pipeline.NodeOption{pipeline.Unordered()}, false},
		{"sink", nil, true},
		{"keyed", []pipeline.NodeOption{pipeline.Keyed(workers, func(x int) int { return x })}, false},
		{"keyed-sink", []pipeline.NodeOption{pipeline.Keyed(workers, func(x int) int { return x })}, true},
	}
	for _, v := range variants {
		for _, m := range modes {
			t.Run(v.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				// The last of the workers to start a call fails its item;
				// the others wait until the grace period after the node's
				// failure ends and cancels them.
				var started atomic.Int32
				call := func(ctx context.Context, x int) error {
					if started.Add(1) == workers {
						return errBoom
					}
					<-ctx.Done()
					return errOwn
				}
				clock := clockwork.NewFakeClock()
				b := pipeline.New("siblings", append([]pipeline.Option{
					pipeline.WithClock(clock),
					pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 0
						o.NodeRetry.MaxRetries = 0
						o.OnItemFailure = resilience.Fail
					}),
				}, m.opts...)...)
				src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(200)...))
				opts := append([]pipeline.NodeOption{pipeline.Parallel(workers)}, v.opts...)
				if strings.HasPrefix(v.name, "keyed") {
					opts = v.opts // Keyed sets the workers
				}
				if v.sink {
					pipeline.Sink(b, "work", src, node.SinkFunc[int](call), opts...)
				} else {
					tr := pipeline.Transform(b, "work", src, node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
						return x, call(ctx, x)
					}), opts...)
					pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
				}
				res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), pipeline.DefaultFailGrace)
				require.ErrorIs(t, err, errBoom)
				assert.Equal(t, int64(1), nodeOf(t, res, "work").Failed, "failed items: the one that failed, not its cancelled siblings")
			})
		}
	}
}
