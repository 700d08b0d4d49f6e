package pipelinetest

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/observer"
)

// A Recorder is an observer that keeps every event in the order it arrived.
// Its zero value is ready to use; it is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	events  []any
	changed chan struct{}
}

func (r *Recorder) add(e any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

func (r *Recorder) OnNodeStarted(e observer.NodeEvent)              { r.add(e) }
func (r *Recorder) OnNodeCompleted(e observer.NodeEvent)            { r.add(e) }
func (r *Recorder) OnRetry(e observer.RetryEvent)                   { r.add(e) }
func (r *Recorder) OnRetryExhausted(e observer.RetryExhaustedEvent) { r.add(e) }
func (r *Recorder) OnDeadLetter(e observer.DeadLetterEvent)         { r.add(e) }
func (r *Recorder) OnDrop(e observer.DropEvent)                     { r.add(e) }
func (r *Recorder) OnCircuitStateChanged(e observer.CircuitEvent)   { r.add(e) }

// Events returns a copy of every event so far.
func (r *Recorder) Events() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.events...)
}

// Of returns the events of type E so far, in order.
func Of[E any](r *Recorder) []E {
	var out []E
	for _, e := range r.Events() {
		if x, ok := e.(E); ok {
			out = append(out, x)
		}
	}
	return out
}

// WaitFor waits until r holds at least n events of type E, or ctx is done.
func WaitFor[E any](ctx context.Context, r *Recorder, n int) ([]E, error) {
	for {
		r.mu.Lock()
		var out []E
		for _, e := range r.events {
			if x, ok := e.(E); ok {
				out = append(out, x)
			}
		}
		if len(out) >= n {
			r.mu.Unlock()
			return out, nil
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}
