package progress

import (
	"fmt"
	"strings"
)

// The Reporter draws its frames under its lock, on whichever goroutine
// ticks or tells of a run's end, and writes them from its own goroutine
// only (or from Stop once that goroutine ended), outside the lock: an
// event never waits for the output. While a write is slow, the frames
// drawn meanwhile wait in an unsent value, which keeps no more than it
// takes to show the same: a newer frame of the live runs replaces an older
// one, and a run's final lines are kept until written. One goroutine
// writes at a time, so frames are written in the order they were drawn.

// lineFrames holds the lines drawn for an output that is not a terminal
// and not written yet. r.mu guards it.
type lineFrames struct {
	kept   string // lines that must be written: final lines, and those drawn before them
	latest string // the latest lines of live runs only, which newer ones replace
}

// add keeps a frame of lines; final says it holds a run's final line.
func (f *lineFrames) add(s string, final bool) {
	switch {
	case s == "":
		// Nothing live to show: what is unsent stays.
	case final:
		f.kept += f.latest + s
		f.latest = ""
	default:
		f.latest = s
	}
}

// take returns the lines to write, and forgets them.
func (f *lineFrames) take() string {
	s := f.kept + f.latest
	*f = lineFrames{}
	return s
}

// screenFrames holds what was drawn for a terminal and not written yet,
// and how many lines the live region has on the screen. r.mu guards it.
type screenFrames struct {
	drawn  int      // lines of the live region written, which the next write redraws in place
	shown  int      // lines of the live region of the latest frame drawn
	kept   []string // lines of runs that ended, to stay above the live region
	live   []string // the live region of the latest frame
	redraw bool     // a frame was drawn since the last write
}

// add keeps a frame: kept holds the lines of runs that ended, live the
// live region, which replaces the one of any frame not written yet.
func (f *screenFrames) add(kept, live []string) {
	f.kept = append(f.kept, kept...)
	f.live = live
	f.shown = len(live)
	f.redraw = true
}

// take returns what redraws the screen from what was written last to the
// latest frame, and forgets the frames.
func (f *screenFrames) take() string {
	if !f.redraw {
		return ""
	}
	var b strings.Builder
	if f.drawn > 0 {
		fmt.Fprintf(&b, cursorUp, f.drawn)
	}
	for _, l := range append(f.kept, f.live...) {
		b.WriteString("\r")
		b.WriteString(l)
		b.WriteString(eraseLine + "\n")
	}
	b.WriteString(eraseBelow)
	f.drawn = len(f.live)
	f.kept, f.live, f.redraw = nil, nil, false
	return b.String()
}

// takeFrame returns what was drawn and not written yet, to write in one
// call so that it does not flicker, and forgets it. r.mu is held.
func (r *Reporter) takeFrame() string {
	if r.tty {
		return r.screen.take()
	}
	return r.lines.take()
}

// flush writes what was drawn and not written yet. Only the Reporter's
// goroutine calls it, or Stop once that goroutine ended.
func (r *Reporter) flush() {
	r.mu.Lock()
	frame := r.takeFrame()
	r.mu.Unlock()
	if frame == "" {
		return
	}
	// A failing output is not the pipeline's problem: the next frame is
	// tried all the same.
	_, _ = r.w.Write([]byte(frame))
}

// wakeWriter tells the Reporter's goroutine that an event drew a frame.
// It never waits: a wake-up that is already pending covers this one.
func (r *Reporter) wakeWriter() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
