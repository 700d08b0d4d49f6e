// Package pipelinetest helps test code built on Sluice: a source that emits
// a slice (tracked or not), a sink that collects what reaches it, a
// transform that fails on chosen items with chosen errors, an observer that
// records events, and helpers to drive a pipeline on a fake clock.
package pipelinetest

import (
	"context"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/node"
)

// A SliceSource emits its items in order. With Tracked set it emits them
// with EmitTracked and records each item's outcome.
type SliceSource[T any] struct {
	// Items are what a run emits, in order; nil emits nothing.
	Items []T
	// Tracked emits the items with EmitTracked and records their
	// outcomes; false, the zero value, emits them with Emit.
	Tracked bool

	mu       sync.Mutex
	outcomes map[int][]node.Outcome
	runs     int
}

// Size returns how many items a run emits: a SliceSource is a node.Sized.
func (s *SliceSource[T]) Size() int64 { return int64(len(s.Items)) }

// NewSliceSource returns a source of items.
func NewSliceSource[T any](items ...T) *SliceSource[T] {
	return &SliceSource[T]{Items: items}
}

// NewTrackedSource returns a source of items that records their outcomes.
func NewTrackedSource[T any](items ...T) *SliceSource[T] {
	return &SliceSource[T]{Items: items, Tracked: true}
}

// Run emits every item, stopping at the first error.
func (s *SliceSource[T]) Run(ctx context.Context, out node.Emitter[T]) error {
	s.mu.Lock()
	s.runs++
	s.mu.Unlock()
	for i, it := range s.Items {
		var err error
		if s.Tracked {
			err = out.EmitTracked(ctx, it, func(o node.Outcome) {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.outcomes == nil {
					s.outcomes = make(map[int][]node.Outcome)
				}
				s.outcomes[i] = append(s.outcomes[i], o)
			})
		} else {
			err = out.Emit(ctx, it)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Outcomes returns, for each item index, every outcome reported for it, in
// order; a correct engine reports exactly one per item.
func (s *SliceSource[T]) Outcomes() map[int][]node.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int][]node.Outcome, len(s.outcomes))
	for k, v := range s.outcomes {
		out[k] = slices.Clone(v)
	}
	return out
}

// Runs returns how many times Run was called.
func (s *SliceSource[T]) Runs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs
}

// A Collector is a sink that keeps every item written to it, and records
// calls of Open, Close and Flush. Its zero value is ready to use.
//
// Having a Flush, it is a sink that buffers (node.Flusher) to the
// pipeline: under pipeline.WithCheckpoint, a pipeline with a Collector
// makes no periodic save and saves its positions only at the end of a run
// that succeeded. To test saves during a run, use a sink without Flush
// (a node.SinkFunc that appends to a slice).
type Collector[T any] struct {
	mu                     sync.Mutex
	items                  []T
	opens, closes, flushes int
}

// Write keeps item.
func (c *Collector[T]) Write(_ context.Context, item T) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items = append(c.items, item)
	return nil
}

// Open counts the call.
func (c *Collector[T]) Open(context.Context) error { c.count(&c.opens); return nil }

// Close counts the call.
func (c *Collector[T]) Close(context.Context) error { c.count(&c.closes); return nil }

// Flush counts the call.
func (c *Collector[T]) Flush(context.Context) error { c.count(&c.flushes); return nil }

func (c *Collector[T]) count(n *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*n++
}

// Items returns a copy of the items written so far, in order.
func (c *Collector[T]) Items() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.items)
}

// Len returns how many items were written.
func (c *Collector[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Lifecycle returns how many times Open, Close and Flush were called.
func (c *Collector[T]) Lifecycle() (opens, closes, flushes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens, c.closes, c.flushes
}

// Faults is a transform that passes items through unchanged but fails on
// chosen items: each call on an item takes the next error scripted for it,
// and passes once its script is used up. A nil error in a script is a
// success. Faults is safe for concurrent use.
type Faults[T comparable] struct {
	mu     sync.Mutex
	script map[T][]error
	always map[T]error
	calls  map[T]int
}

// NewFaults returns a transform failing on the items of script with their
// errors, in order.
func NewFaults[T comparable](script map[T][]error) *Faults[T] {
	cp := make(map[T][]error, len(script))
	for k, v := range script {
		cp[k] = slices.Clone(v)
	}
	return &Faults[T]{script: cp, calls: make(map[T]int)}
}

// FailAlways returns a transform failing every call on each of items with
// err.
func FailAlways[T comparable](err error, items ...T) *Faults[T] {
	f := NewFaults[T](nil)
	f.always = make(map[T]error, len(items))
	for _, it := range items {
		f.always[it] = err
	}
	return f
}

// Process passes in through or returns its next scripted error.
func (f *Faults[T]) Process(_ context.Context, in T) (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[in]++
	if err, ok := f.always[in]; ok {
		return in, err
	}
	if s := f.script[in]; len(s) > 0 {
		f.script[in] = s[1:]
		if s[0] != nil {
			return in, s[0]
		}
	}
	return in, nil
}

// Calls returns how many times item was processed.
func (f *Faults[T]) Calls(item T) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[item]
}
