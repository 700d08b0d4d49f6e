package pipeline

import (
	"slices"
	"sync"
	"time"
)

// idleFlush bounds how long an item a source emitted waits in a partly
// filled hand-over batch when the source stops emitting for a while.
//
// Engine stages hand their gathered output over as soon as their own input
// runs dry, but a source's input is your code: the engine cannot see that
// it went idle (waiting for a broker, sleeping between polls). So each run
// has one flusher goroutine that hands over, after idleFlush, whatever a
// source left in a batch. It measures idleFlush on the real clock: it
// bounds latency, it decides nothing a test could observe but timing. It
// is not a setting: WithHandOverBatch(1) is the way to hand every item
// over at once.
const idleFlush = 500 * time.Microsecond

// A lingerer is a source's output that the flusher may hand over.
type lingerer interface {
	// tryFlush hands over what is pending without blocking, unless the
	// source is emitting right now, and says what is left.
	tryFlush() flushResult
}

type flushResult int

const (
	flushDone    flushResult = iota // nothing left pending
	flushPending                    // the next stage was full: try again
	flushBusy                       // the source was emitting: try again later
)

// A flusher hands over what idle sources left pending, idleFlush after it was
// gathered. It runs on one goroutine owned by the run.
type flusher struct {
	mu    sync.Mutex
	once  sync.Once
	queue []lingering
	wake  chan struct{}
	stop  chan struct{}
	crew  crew // its one goroutine, loop
}

type lingering struct {
	l        lingerer
	deadline time.Time
	busy     int // times in a row the source was emitting when looked at
}

func newFlusher() *flusher {
	f := &flusher{wake: make(chan struct{}, 1), stop: make(chan struct{})}
	f.crew.Go(func() error { f.loop(); return nil })
	return f
}

// arm asks the flusher to look at l after idleFlush.
func (f *flusher) arm(l lingerer) { f.rearm(lingering{l: l}) }

// rearm queues it to be looked at after idleFlush, or longer when its source
// was busy the last times: a source blocked by backpressure holds its lock,
// and has nothing pending that its own send will not hand over.
func (f *flusher) rearm(it lingering) {
	it.deadline = time.Now().Add(idleFlush << min(it.busy, 4))
	f.mu.Lock()
	// Keep the queue in deadline order: a busy source waits longer than the
	// others queued after it.
	i := len(f.queue)
	for i > 0 && f.queue[i-1].deadline.After(it.deadline) {
		i--
	}
	f.queue = slices.Insert(f.queue, i, it)
	first := i == 0
	f.mu.Unlock()
	if first {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// close stops the flusher, waits for its goroutine to return and returns
// its panic as an error, if it had one. It may be called more than once.
func (f *flusher) close() error {
	f.once.Do(func() { close(f.stop) })
	return f.crew.Wait()
}

func (f *flusher) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-f.wake:
		case <-timer.C:
		}
		now := time.Now()
		f.mu.Lock()
		due := 0
		for due < len(f.queue) && !f.queue[due].deadline.After(now) {
			due++
		}
		ready := append([]lingering(nil), f.queue[:due]...)
		f.queue = append(f.queue[:0], f.queue[due:]...)
		f.mu.Unlock()

		for _, it := range ready {
			switch it.l.tryFlush() {
			case flushBusy:
				it.busy++
				f.rearm(it)
			case flushPending:
				it.busy = 0
				f.rearm(it)
			}
		}

		f.mu.Lock()
		if len(f.queue) > 0 {
			timer.Reset(time.Until(f.queue[0].deadline))
		}
		f.mu.Unlock()
	}
}
