package progress

import "time"

// WithTickHook calls f after each tick of the Reporter's goroutine, so
// that a test on a fake clock knows when a tick's drawing is done.
func WithTickHook(f func()) Option {
	return func(r *Reporter) { r.tickHook = f }
}

// TickEvery returns how often the Reporter samples the counters.
func (r *Reporter) TickEvery() time.Duration { return r.tickEvery }

// Cut is cut, which shortens a terminal's line to its width.
func Cut(s string, width int) string { return cut(s, width) }

// LoopDone returns the channel closed when the Reporter's latest ticking
// goroutine ends (nil if none started): its ticker is stopped by then.
func (r *Reporter) LoopDone() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loopDone
}
