package pipeline

import (
	"context"
	"sync"
)

// windowPerParked is the reorder window of an ordered Parallel node in
// items per MaxParked: the most items the node holds between reading one
// and handing its result over, 4096 by default. While the oldest item
// waits, the workers go on until the window is full, so it should hold
// what they call during a wait: with a tenth of the items parking, a
// window of four times MaxParked fills before MaxParked does.
const windowPerParked = 4

// A reorderWindow bounds the items of an ordered node between its dealer and its
// collector: the dealer takes room for a chunk before it sends it, the
// collector gives it back once the chunk's results were handed over. A
// chunk larger than the window passes when the window is empty, so that
// the node never stops for good.
type reorderWindow struct {
	max int

	mu   sync.Mutex
	used int
	room chan struct{} // closed when room is given back; nil if no one waits
}

func newReorderWindow(max int) *reorderWindow { return &reorderWindow{max: max} }

// acquire takes room for n items, waiting until there is room or ctx
// ends; on ctx's end it takes nothing and returns ctx's cause.
func (w *reorderWindow) acquire(ctx context.Context, n int) error {
	w.mu.Lock()
	for w.used > 0 && w.used+n > w.max {
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		w.mu.Lock()
	}
	w.used += n
	w.mu.Unlock()
	return nil
}

// release gives back the room of n items.
func (w *reorderWindow) release(n int) {
	w.mu.Lock()
	w.used -= n
	if w.room != nil {
		close(w.room)
		w.room = nil
	}
	w.mu.Unlock()
}
