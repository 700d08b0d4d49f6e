// Package progress shows how far running pipelines have got: a
// [Reporter] reads their live counters (observer.StatsReader) and draws,
// on a terminal, one line per node redrawn in place, or, on any other
// output (a log file, a pipe, CI), one compact line every few seconds.
//
// Each line has the items a node took in and handed on, its rate over the
// last few seconds (the window, 5 s by default) beside its average since
// the run started, its retries, dead letters, broker retries, hand-offs
// and skips, and its circuit breaker's state when the breaker is not
// closed. A source that implements node.Sized also gets how far it has
// read. When every source is sized, the run gets how much of their items
// settled and an ETA: the items left to settle divided by the rate they
// settle at. Items a source tracks (EmitTracked) settle once their fate is
// final end to end, as the source counts them (NodeStats.Settled): exact;
// untracked items where they reach an end (written, or filtered, skipped,
// dead-lettered, given back to the broker): an estimate. While a drain runs
// (pipeline.Pipeline.Drain) the display says "draining" and counts the
// items in flight instead; the final frame says how the run ended: done,
// drained, cancelled, drain timed out or failed (naming the node).
//
// A Reporter is an observer: hand it to pipeline.WithObserver (alone or in
// observer.Multi) and it starts drawing when a run starts and draws a final
// frame when the run ends. It writes from its own goroutine, so that a slow
// or blocked output never holds up a pipeline: the final frame is written
// just after the run ends, perhaps after Run returns. Call Stop when done
// with it: Stop returns once every frame is written.
//
//	r := progress.New(os.Stderr)
//	defer r.Stop()
//	b := pipeline.New("orders", pipeline.WithObserver(r))
//
// It can also be handed a pipeline directly, with UseStats, and started
// with Start; Stop then draws the final frame.
package progress

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/term"

	"github.com/sluicehq/sluice/internal/same"
	"github.com/sluicehq/sluice/observer"
)

// Defaults of the options.
const (
	// DefaultTTYInterval is how often a terminal is redrawn.
	DefaultTTYInterval = 200 * time.Millisecond
	// DefaultLineInterval is how often a line is printed on an output
	// that is not a terminal.
	DefaultLineInterval = 2 * time.Second
	// DefaultWindow is the span a recent rate is measured over.
	DefaultWindow = 5 * time.Second
)

// An Option changes a Reporter.
type Option func(*Reporter)

// WithInterval sets how often the Reporter draws: how often it redraws a
// terminal (default [DefaultTTYInterval]), or prints a line on another
// output (default [DefaultLineInterval]). A value of 0 or less keeps the
// default.
func WithInterval(d time.Duration) Option {
	return func(r *Reporter) { r.interval = d }
}

// WithWindow sets the span recent rates are measured over (default
// [DefaultWindow]). A value of 0 or less keeps the default.
func WithWindow(d time.Duration) Option {
	return func(r *Reporter) { r.window = d }
}

// WithClock sets the clock the Reporter ticks on and measures rates with,
// such as a fake clock in tests (default: the real clock). It should be
// the clock of the pipelines it reports on. A nil clock keeps the real
// one.
func WithClock(c clockwork.Clock) Option {
	return func(r *Reporter) {
		if c != nil {
			r.clock = c
		}
	}
}

// WithTTY says whether the output is a terminal, to redraw in place, or
// not, to print lines. Without it, the Reporter asks the output: only an
// *os.File (anything with an Fd method) can be a terminal.
func WithTTY(tty bool) Option {
	return func(r *Reporter) { r.tty, r.ttySet = tty, true }
}

// WithLineNodes names the nodes the compact line of a non-terminal output
// shows counts and rates of, in that order. By default it shows each
// pipeline's sources and sinks. Names a pipeline has not are left out. The
// terminal display always shows every node.
func WithLineNodes(names ...string) Option {
	return func(r *Reporter) { r.lineNodes = append([]string(nil), names...) }
}

// A Reporter draws the progress of the pipelines it observes. It is an
// observer.Observer and an observer.StatsUser; create it with [New]. Its
// methods are safe for concurrent use.
type Reporter struct {
	// Nop supplies the observer methods whose events the Reporter does
	// not show; it holds nothing.
	observer.Nop

	w         io.Writer
	clock     clockwork.Clock
	interval  time.Duration
	window    time.Duration
	tty       bool
	ttySet    bool
	lineNodes []string
	fd        int // the terminal's file descriptor, for its width; -1 if none

	tickEvery time.Duration // how often it samples the counters
	drawEvery int           // it draws every drawEvery-th sample

	tickHook func() // tests: called after each tick

	// mu guards the state and the frames drawn and not written yet, which
	// only the loop's goroutine (or Stop, once it ended) writes, outside
	// mu: see output.go.
	mu       sync.Mutex
	lines    lineFrames   // not a terminal
	screen   screenFrames // a terminal
	pipes    []*pipe
	explicit bool // Start was called: the loop runs until Stop
	stopped  bool // Stop was called: nothing is drawn any more
	loopStop chan struct{}
	loopDone chan struct{}
	// looping says the goroutine of loopDone has not decided to end: a
	// run that starts meanwhile hands it a new loopStop instead of
	// starting another (see loop).
	looping bool
	wake    chan struct{} // an event drew a frame for the loop to write

	stopOnce sync.Once
}

// New returns a Reporter that draws on w. It draws nothing until a run
// starts (or Start is called); see the package documentation.
func New(w io.Writer, opts ...Option) *Reporter {
	r := &Reporter{w: w, clock: clockwork.NewRealClock(), fd: -1, wake: make(chan struct{}, 1)}
	for _, o := range opts {
		o(r)
	}
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		fd := int(f.Fd())
		if term.IsTerminal(fd) {
			r.fd = fd
			if !r.ttySet {
				r.tty = true
			}
		}
	}
	if r.interval <= 0 {
		r.interval = DefaultLineInterval
		if r.tty {
			r.interval = DefaultTTYInterval
		}
	}
	if r.window <= 0 {
		r.window = DefaultWindow
	}
	// Sample at least five times a window, so that a recent rate is a
	// rate over about the window even when lines are rare; draw on a
	// whole number of samples.
	r.drawEvery = max(1, min(100, int((5*r.interval+r.window-1)/r.window)))
	// At least a nanosecond: an interval under drawEvery nanoseconds made
	// a tick of 0, and NewTicker(0) panicked on the Reporter's goroutine.
	r.tickEvery = max(time.Nanosecond, r.interval/time.Duration(r.drawEvery))
	return r
}

// UseStats adds a pipeline to report on. pipeline.Builder.Build calls it
// for every pipeline built with the Reporter as (or in) its observer; a
// program can also call it with a pipeline it built otherwise, then call
// Start. A pipeline it holds already is shown once. It fails only for a
// nil reader.
func (r *Reporter) UseStats(sr observer.StatsReader) error {
	if sr == nil {
		return errors.New("progress: UseStats: nil StatsReader")
	}
	st := sr.Stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.pipes, func(p *pipe) bool { return same.Is(p.r, sr) }) {
		return nil // shown already: once is enough
	}
	r.pipes = append(r.pipes, &pipe{r: sr, last: st, lastT: r.clock.Now()})
	return nil
}

// ForgetStats lets go of a pipeline that UseStats took: the Reporter shows
// it no more. observer.Multi calls it when another observer refused the
// pipeline and its Build failed, so that the Reporter does not count a
// pipeline that never runs (and prefix the lines of the one that does
// with its name).
func (r *Reporter) ForgetStats(sr observer.StatsReader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pipes = slices.DeleteFunc(r.pipes, func(p *pipe) bool { return same.Is(p.r, sr) })
	r.idleStop()
}

var _ observer.StatsForgetter = (*Reporter)(nil)

// Start starts the Reporter ticking now: it reads the counters at once and
// draws its first frame an interval later. It keeps ticking until Stop,
// between runs too; without Start the Reporter ticks only while a run it
// heard start is running. Start after Stop does nothing.
func (r *Reporter) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.explicit = true
	now := r.clock.Now()
	for _, p := range r.pipes {
		r.sample(p, now)
	}
	r.ensureLoop()
}

// Stop stops the Reporter: it waits for its goroutine to end, draws a
// final frame of the runs it was showing, and draws nothing after. It
// returns once every frame is written, the final frames of runs that
// ended before it included, so it waits for the output: call it before
// the program writes anything else to a terminal the Reporter draws on.
// It may be called more than once, and from several goroutines; every
// call returns once the first is done.
func (r *Reporter) Stop() {
	r.stopOnce.Do(r.stop)
}

func (r *Reporter) stop() {
	r.mu.Lock()
	r.stopped = true
	if r.loopStop != nil {
		close(r.loopStop)
		r.loopStop = nil
	}
	done := r.loopDone
	r.mu.Unlock()
	if done != nil {
		<-done // it wrote what it had
	}
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	var ending []*pipe
	for _, p := range r.pipes {
		if r.sample(p, now) || p.live {
			p.live = false
			ending = append(ending, p)
		}
	}
	r.draw(now, ending, false)
}

// OnNodeStarted starts the Reporter's ticking when a run starts.
func (r *Reporter) OnNodeStarted(e observer.NodeEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	p := r.find(e)
	if p == nil {
		return
	}
	if p.runID != e.RunID || !p.heard {
		now := r.clock.Now()
		if st := p.r.Stats(); st.RunID == e.RunID {
			// The counters as this run starts: no node has taken an
			// item yet (each starts after its event, and the events
			// wait for r.mu). The last sample, of the run before,
			// missed what settled after its last node completed: the
			// tracked items its end failed.
			p.last, p.lastT = st, now
		}
		// A tick may have seen the run first, and begun it from the
		// sample before: it starts again from these counters, now, as
		// none of its nodes ran yet.
		r.begin(p, e.RunID, now)
		p.heard, p.events = true, true
	}
	r.ensureLoop()
}

// OnNodeCompleted draws the final frame of a run when its last node
// completes, for the Reporter's goroutine to write: it never waits for the
// output.
func (r *Reporter) OnNodeCompleted(e observer.NodeEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	p := r.find(e)
	if p == nil || p.runID != e.RunID || !p.live {
		return
	}
	if e.Err != nil {
		p.ended(e)
	}
	p.completed++
	if p.completed < len(p.last.Nodes) {
		return
	}
	now := r.clock.Now()
	r.sample(p, now)
	p.live = false
	r.draw(now, []*pipe{p}, false)
	r.wakeWriter()
	r.idleStop()
}

// find returns the pipeline an event is about: by name, and by run when
// several have the name.
func (r *Reporter) find(e observer.NodeEvent) *pipe {
	var found []*pipe
	for _, p := range r.pipes {
		if p.last.Pipeline == e.Pipeline {
			found = append(found, p)
		}
	}
	if len(found) > 1 {
		for _, p := range found {
			if p.runID == e.RunID || p.r.Stats().RunID == e.RunID {
				return p
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	return found[0]
}

// ensureLoop starts the ticking goroutine unless it runs. r.mu is held.
func (r *Reporter) ensureLoop() {
	if r.stopped || r.loopStop != nil {
		return
	}
	stop := make(chan struct{})
	r.loopStop = stop
	if r.looping {
		return // the goroutine still writing takes stop up
	}
	done, prev := make(chan struct{}), r.loopDone
	r.loopDone, r.looping = done, true
	go r.loop(stop, done, prev)
}

// idleStop ends the goroutine once no run is live, unless Start asked it
// to keep ticking; it writes what was drawn before it ends. r.mu is held.
func (r *Reporter) idleStop() {
	if r.explicit || r.loopStop == nil {
		return
	}
	for _, p := range r.pipes {
		if p.live {
			return
		}
	}
	close(r.loopStop)
	r.loopStop = nil
}

// loop ticks, and writes the frames drawn, until stop is closed; then it
// writes what is left. It is the only goroutine that writes, one loop at
// a time, so that frames are written in order. When a run started while
// it wrote what was left (ensureLoop gave it a new stop), it goes on
// ticking: a goroutine of its own per run, each waiting for the one
// before, would pile up without bound while the output is blocked.
func (r *Reporter) loop(stop <-chan struct{}, done chan<- struct{}, prev <-chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev // the goroutine before this one has ended: one at a time
	}
	t := r.clock.NewTicker(r.tickEvery)
	defer t.Stop()
	for n := 1; ; {
		select {
		case <-stop:
			r.flush() // the final frame of the run that ended last
			r.mu.Lock()
			next := r.loopStop
			if next == nil {
				r.looping = false // what is drawn from now on is the next goroutine's
				r.mu.Unlock()
				// A run that began and ended during the flush drew its
				// final frame then, and its wake-up may have merged
				// with the one before: written now, before the next
				// goroutine (which waits for this one) writes anything.
				r.flush()
				return
			}
			r.mu.Unlock()
			stop, n = next, 1
			t.Reset(r.tickEvery)
			continue
		case <-r.wake:
			r.flush()
			continue
		case <-t.Chan():
		}
		r.tick(n%r.drawEvery == 0)
		n++
		r.flush()
		if r.tickHook != nil {
			r.tickHook()
		}
	}
}

// tick samples every pipeline, and draws if draw is set or a run ended.
func (r *Reporter) tick(draw bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	now := r.clock.Now()
	var ending []*pipe
	for _, p := range r.pipes {
		if r.sample(p, now) && !p.st.Running {
			// The run ended without the events that tell (the
			// Reporter was handed the pipeline with UseStats).
			p.live = false
			ending = append(ending, p)
		}
	}
	if draw || len(ending) > 0 {
		r.draw(now, ending, draw)
	}
	if len(ending) > 0 {
		r.idleStop()
	}
}

// sample reads p's counters at now and reports whether p is showing a run
// (live, or ending now). r.mu is held.
func (r *Reporter) sample(p *pipe, now time.Time) bool {
	st := p.r.Stats()
	if st.RunID != "" && st.RunID != p.runID {
		// A run the events did not announce: it started after the last
		// sample. When the pipeline's events reach the Reporter, none
		// of the run's nodes has started (each waits for its event,
		// which waits for r.mu): its counters now are where it starts,
		// and the last sample, of the run before, may have missed what
		// that run's end settled. Without events (UseStats alone), the
		// run may have gone on since it started: it starts from the
		// last sample.
		start := p.lastT
		if p.events {
			// Its start is now too: the last sample may be long before
			// (no tick while no run was live).
			p.last, start = st, now
		}
		r.begin(p, st.RunID, start)
	}
	p.last, p.lastT = st, now
	if !p.live {
		return false
	}
	p.st = st
	p.add(now, st)
	p.trim(now, r.window)
	return true
}

// begin starts showing run id of p, which started at start. r.mu is held.
func (r *Reporter) begin(p *pipe, id string, start time.Time) {
	p.runID, p.start, p.live, p.completed, p.end, p.heard = id, start, true, 0, "", false
	// The counters add up over every run: this run's are what they grew
	// by since the last sample before it.
	p.base = p.last.Nodes
	p.st = p.last
	p.samples = p.samples[:0]
	p.add(start, p.last)
}

// A pipe is a pipeline the Reporter reports on.
type pipe struct {
	r     observer.StatsReader
	last  observer.Stats // the latest sample, run or not
	lastT time.Time

	runID     string
	live      bool // showing run runID: it has not ended
	heard     bool // a node of run runID was heard to start
	events    bool // the pipeline's node events reach the Reporter
	start     time.Time
	completed int                  // nodes of the run that completed
	end       string               // how the run ended, from its nodes' errors: "" for no error seen
	base      []observer.NodeStats // the counters when the run started
	st        observer.Stats       // the run's latest sample
	samples   []sample             // the run's samples within the window, oldest first
}

type sample struct {
	t       time.Time
	out     []int64 // each node's Out
	settled int64   // the run's items settled
}

// add keeps a sample of the run's counters; p.st is st.
func (p *pipe) add(t time.Time, st observer.Stats) {
	out := make([]int64, len(st.Nodes))
	for i, n := range st.Nodes {
		out[i] = n.Out
	}
	settled, _ := p.settled()
	p.samples = append(p.samples, sample{t, out, settled})
}

// ended notes how the run ended from e, the completion of one of its
// nodes with an error: a node that failed the run names it, and so does
// a node it stopped; the caller's cancel or deadline is "cancelled"; a
// drain that ran out of time is "drain timed out". A failure outranks a
// cancellation seen first.
func (p *pipe) ended(e observer.NodeEvent) {
	var end string
	switch {
	case e.Stopped && e.StoppedBy != "":
		end = "failed (" + printable(e.StoppedBy) + ")"
	case errors.Is(e.Err, context.Canceled), errors.Is(e.Err, context.DeadlineExceeded):
		end = "cancelled"
	case e.Stopped && e.Err != nil:
		// Another end of the run, such as a drain that ran out of time
		// (pipeline.ErrDrainTimeout): its own words.
		end = printable(strings.TrimPrefix(e.Err.Error(), "pipeline: "))
	case e.Stopped:
		end = "cancelled"
	default:
		end = "failed (" + printable(e.Node) + ")"
	}
	if p.end == "" || p.end == "cancelled" {
		p.end = end
	}
}

// trim drops the samples older than the one a window before now.
func (p *pipe) trim(now time.Time, window time.Duration) {
	cut := now.Add(-window)
	i := 0
	for i+1 < len(p.samples) && !p.samples[i+1].t.After(cut) {
		i++
	}
	p.samples = append(p.samples[:0], p.samples[i:]...)
}

// rate returns node i's recent rate of Out per second: over the window
// before now, or over the run so far when it is shorter.
func (p *pipe) rate(i int, now time.Time) float64 {
	if len(p.samples) == 0 || i >= len(p.st.Nodes) {
		return 0
	}
	old := p.samples[0]
	dt := now.Sub(old.t).Seconds()
	if dt <= 0 || i >= len(old.out) {
		return 0
	}
	return float64(p.st.Nodes[i].Out-old.out[i]) / dt
}

var _ observer.StatsUser = (*Reporter)(nil)
