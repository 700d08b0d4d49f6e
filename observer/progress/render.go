package progress

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/resilience"
)

// The only terminal control sequences the Reporter writes (ECMA-48, which
// every terminal emulator in use understands): cursor up n lines, erase to
// the end of the line, erase to the end of the screen.
const (
	cursorUp    = "\x1b[%dA"
	eraseLine   = "\x1b[K"
	eraseBelow  = "\x1b[J"
	minTTYWidth = 20
)

// draw writes a frame: ending holds the pipelines whose run ended now;
// when all is set, the other live ones are drawn too (a terminal redraws
// them always). r.mu is held.
func (r *Reporter) draw(now time.Time, ending []*pipe, all bool) {
	if r.tty {
		r.drawTTY(now, ending)
		return
	}
	var b strings.Builder
	for _, p := range r.pipes {
		if slices.Contains(ending, p) || (all && p.live) {
			b.WriteString(r.line(p, now))
			b.WriteByte('\n')
		}
	}
	r.lines.add(b.String(), len(ending) > 0)
}

// drawTTY redraws the live region of a terminal in place: the pipelines
// whose run ended now come first, and stay on the screen above the region
// from then on.
func (r *Reporter) drawTTY(now time.Time, ending []*pipe) {
	var lines, kept []string
	for _, p := range ending {
		kept = append(kept, r.block(p, now)...)
	}
	for _, p := range r.pipes {
		if p.live {
			lines = append(lines, r.block(p, now)...)
		}
	}
	if r.screen.shown == 0 && len(kept)+len(lines) == 0 {
		return // the screen shows no live region, and has none to show
	}
	width := 0
	if r.fd >= 0 {
		if w, _, err := term.GetSize(r.fd); err == nil && w >= minTTYWidth {
			width = w - 1 // a line as wide as the screen wraps on some terminals
		}
	}
	for i := range kept {
		kept[i] = cut(kept[i], width)
	}
	for i := range lines {
		lines[i] = cut(lines[i], width)
	}
	r.screen.add(kept, lines)
}

// block returns a pipeline's lines on a terminal: a header, and a line per
// node.
func (r *Reporter) block(p *pipe, now time.Time) []string {
	head := strings.Join(append([]string{printable(p.st.Pipeline), elapsed(now.Sub(p.start))}, p.state(now)...), "  ")
	names := make([]string, len(p.st.Nodes))
	wide := len("node")
	for i, n := range p.st.Nodes {
		names[i] = printable(n.Node)
		wide = max(wide, utf8.RuneCountInString(names[i]))
	}
	pad := func(name string) string { return name + strings.Repeat(" ", wide-utf8.RuneCountInString(name)) }
	lines := []string{head, fmt.Sprintf("  %s  %8s  %8s  %8s  %8s", pad("node"), "in", "out", "rate", "avg")}
	for i, n := range p.st.Nodes {
		c := p.count(i)
		in := "-"
		if n.Kind != observer.KindSource {
			in = fmt.Sprint(c.In)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %s  %8s  %8d  %8s  %8s", pad(names[i]), in, c.Out,
			human(p.rate(i, now))+"/s", human(p.avg(i, now))+"/s")
		if n.Sized {
			// How far the source has read; how far the run has got is
			// the header's, measured where items settle.
			fmt.Fprintf(&b, "  of %d", n.Size)
			if n.Size > 0 {
				fmt.Fprintf(&b, " (%d%% read)", percent(c.Out, n.Size))
			}
		}
		for _, x := range extras(c) {
			b.WriteString("  " + x)
		}
		lines = append(lines, b.String())
	}
	return lines
}

// line returns a pipeline's compact line for an output that is not a
// terminal: the chosen nodes' counts and rates, then the whole pipeline's
// retries, dead letters, breakers that are not closed, and its state: how
// far it got and its ETA, draining, or how it ended.
func (r *Reporter) line(p *pipe, now time.Time) string {
	var parts []string
	if len(r.pipes) > 1 {
		parts = append(parts, printable(p.st.Pipeline))
	}
	parts = append(parts, elapsed(now.Sub(p.start)))
	for _, i := range r.lineIndexes(p) {
		n, c := p.st.Nodes[i], p.count(i)
		s := fmt.Sprintf("%s %d", printable(n.Node), c.Out)
		if n.Sized {
			s += fmt.Sprintf("/%d", n.Size)
		}
		parts = append(parts, s+fmt.Sprintf(" (%s/s, avg %s/s)", human(p.rate(i, now)), human(p.avg(i, now))))
	}
	var sum observer.NodeStats
	var open []string
	for i, n := range p.st.Nodes {
		c := p.count(i)
		sum.ItemRetries += c.ItemRetries
		sum.NodeRestarts += c.NodeRestarts
		sum.NodeRetries += c.NodeRetries
		sum.DeadLettered += c.DeadLettered
		sum.BrokerRetries += c.BrokerRetries
		sum.HandedOff += c.HandedOff
		sum.Late += c.Late
		sum.Skipped += c.Skipped
		if n.Circuit != resilience.CircuitClosed {
			open = append(open, printable(n.Node)+" "+circuit(n.Circuit))
		}
	}
	parts = append(parts, extras(sum)...)
	if len(open) > 0 {
		parts = append(parts, "breaker "+strings.Join(open, ", "))
	}
	parts = append(parts, p.state(now)...)
	return strings.Join(parts, "  ")
}

// state returns what a frame says of the run as a whole: while it runs,
// how much of its sized sources' items settled and its ETA; while it
// drains, "draining", the items left in flight and their ETA; once it
// ended, how: done, drained, cancelled, failed (naming the node), or
// stopped when Stop cut the display short.
func (p *pipe) state(now time.Time) []string {
	if !p.live {
		return []string{p.outcome()}
	}
	var parts []string
	settled, emitted := p.settled()
	left := int64(-1)
	if p.st.Draining {
		left = emitted - settled
		parts = append(parts, fmt.Sprintf("draining %d left", max(left, 0)))
	} else if size, ok := p.size(); ok {
		left = size - settled
		if size > 0 {
			parts = append(parts, fmt.Sprintf("settled %d%%", percent(settled, size)))
		}
	}
	if left > 0 {
		if rate := p.settledRate(now); rate > 0 {
			parts = append(parts, "ETA "+duration(etaOf(left, rate)))
		}
	}
	return parts
}

// outcome returns how p's run ended, for its final frame.
func (p *pipe) outcome() string {
	switch {
	case p.end != "":
		return p.end
	case !p.finished():
		return "stopped"
	case p.st.Draining:
		return "drained"
	default:
		return "done"
	}
}

// lineIndexes returns the nodes a compact line shows: WithLineNodes's, or
// the sources and sinks.
func (r *Reporter) lineIndexes(p *pipe) []int {
	var idx []int
	if r.lineNodes != nil {
		for _, name := range r.lineNodes {
			for i, n := range p.st.Nodes {
				if n.Node == name {
					idx = append(idx, i)
					break
				}
			}
		}
		return idx
	}
	for i, n := range p.st.Nodes {
		if n.Kind == observer.KindSource || n.Kind == observer.KindSink {
			idx = append(idx, i)
		}
	}
	return idx
}

// extras returns what a node's line says beyond its counts, when not zero.
func extras(c observer.NodeStats) []string {
	var out []string
	add := func(n int64, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%s %d", what, n))
		}
	}
	add(c.ItemRetries, "retries")
	add(c.NodeRestarts, "restarts")
	add(c.NodeRetries, "node retries")
	add(c.DeadLettered, "dead")
	add(c.Late, "late")
	add(c.BrokerRetries, "broker retries")
	add(c.HandedOff, "handed off")
	add(c.Skipped, "skipped")
	add(c.Filtered, "filtered")
	if c.Circuit != resilience.CircuitClosed {
		out = append(out, "breaker "+circuit(c.Circuit))
	}
	return out
}

// circuit returns how a breaker's state reads on the display: "open" or
// "half-open", as docs/progress.md shows them, rather than the state's
// String, "half_open", which is a name for logs and metrics.
func circuit(c resilience.CircuitState) string {
	if c == resilience.CircuitHalfOpen {
		return "half-open"
	}
	return c.String()
}

// printable returns a name as it can be drawn: a new line, a control
// character or an escape sequence in it is written as a Go escape (\n,
// \x1b, \u2028), so that a name neither breaks a terminal's redraw, which
// counts the lines it drew, nor reaches the terminal as a command. Other
// characters, quotes and backslashes included, stay as they are.
func printable(name string) string {
	for _, c := range name {
		if !strconv.IsGraphic(c) {
			return escape(name)
		}
	}
	return name
}

// escape writes every character of s that is not graphic as a Go escape.
func escape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strconv.IsGraphic(c) {
			b.WriteRune(c)
			continue
		}
		q := strconv.QuoteRuneToGraphic(c) // such as '\n': drop the quotes
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// finished says whether p's run ran to its end, rather than being cut
// short by Stop.
func (p *pipe) finished() bool {
	return !p.st.Running || (len(p.st.Nodes) > 0 && p.completed >= len(p.st.Nodes))
}

// count returns node i's counters in this run: the circuit state is the
// current one.
func (p *pipe) count(i int) observer.NodeStats {
	c := p.st.Nodes[i]
	if i < len(p.base) {
		b := p.base[i]
		c.In -= b.In
		c.Out -= b.Out
		c.Failed -= b.Failed
		c.Skipped -= b.Skipped
		c.DeadLettered -= b.DeadLettered
		c.Filtered -= b.Filtered
		c.Fallbacks -= b.Fallbacks
		c.HandedOff -= b.HandedOff
		c.Late -= b.Late
		c.BrokerRetries -= b.BrokerRetries
		c.ItemRetries -= b.ItemRetries
		c.NodeRestarts -= b.NodeRestarts
		c.NodeRetries -= b.NodeRetries
		c.Tracked -= b.Tracked
		c.Settled -= b.Settled
	}
	return c
}

// avg returns node i's average rate of Out since the run started.
func (p *pipe) avg(i int, now time.Time) float64 {
	dt := now.Sub(p.start).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(p.count(i).Out) / dt
}

// settled returns how many items of p's run settled, and how many its
// sources emitted. Settled is at most emitted.
//
// When every source tracks every item it emits (node.Emitter.EmitTracked,
// as the broker sources do), both are the sources' own counts
// (NodeStats.Settled, Tracked): an item settled once its fate is final end
// to end, whatever the graph makes of it, so they are exact. Otherwise
// they are an estimate: settled items are counted where they end, written
// by a sink, or filtered, skipped, dead-lettered, handed off or given back
// to the broker at any node, and emitted ones as the sources' Out. That is
// exact for a pipeline whose items each end once; a broadcast to two sinks
// counts an item at each, a FlatMap its parts, an Aggregate its values.
func (p *pipe) settled() (settled, emitted int64) {
	if s, e, ok := p.tracked(); ok {
		return s, e
	}
	for i, n := range p.st.Nodes {
		c := p.count(i)
		if n.Kind == observer.KindSource {
			emitted += c.Out
			continue
		}
		if n.Kind == observer.KindSink {
			settled += c.Out
		}
		settled += c.Filtered + c.Skipped + c.DeadLettered + c.BrokerRetries + c.HandedOff
	}
	return min(settled, emitted), emitted
}

// tracked returns the settled and emitted items of p's run as its sources
// count them, and ok when every source tracks every item it emits. A
// source counts a tracked item when it emits it, and publishes Out a little
// later: one that emits untracked items shows a Tracked below its Out.
func (p *pipe) tracked() (settled, emitted int64, ok bool) {
	for i, n := range p.st.Nodes {
		if n.Kind != observer.KindSource {
			continue
		}
		c := p.count(i)
		if c.Tracked < c.Out {
			return 0, 0, false
		}
		settled += c.Settled
		emitted += c.Tracked
	}
	return min(settled, emitted), emitted, true
}

// size returns the items p's sources emit in a run: not ok unless every
// source is sized.
func (p *pipe) size() (size int64, ok bool) {
	for _, n := range p.st.Nodes {
		if n.Kind != observer.KindSource {
			continue
		}
		if !n.Sized {
			return 0, false
		}
		size, ok = size+n.Size, true
	}
	return size, ok
}

// settledRate returns the rate per second at which items settled over
// the window before now, or over the run so far when it is shorter.
func (p *pipe) settledRate(now time.Time) float64 {
	if len(p.samples) == 0 {
		return 0
	}
	old := p.samples[0]
	dt := now.Sub(old.t).Seconds()
	if dt <= 0 {
		return 0
	}
	settled, _ := p.settled()
	return float64(settled-old.settled) / dt
}

// maxETA caps an ETA, so that a crawling rate does not overflow it.
const maxETA = 999 * time.Hour

// etaOf returns how long left items take at rate per second.
func etaOf(left int64, rate float64) time.Duration {
	secs := float64(left) / rate
	if secs >= maxETA.Seconds() {
		return maxETA
	}
	return time.Duration(secs * float64(time.Second))
}

// human formats a rate: 0.5, 12, 15.1k, 2.3M.
func human(v float64) string {
	switch {
	case math.IsNaN(v) || v <= 0:
		return "0"
	case v >= 1e12:
		return fmt.Sprintf("%.1fT", v/1e12)
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// percent is 100*part/whole, rounded down, within 0 and 100, and below
// 100 while part is short of whole: in float, as 100*part overflows an
// int64 once part passes about 9.2e16, where float rounding could make
// it 100 early.
func percent(part, whole int64) int64 {
	p := int64(min(100, max(0, 100*float64(part)/float64(whole))))
	if p == 100 && part < whole {
		p = 99
	}
	return p
}

// elapsed formats a run's time so far: 12.0s, then 2m05s.
func elapsed(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return duration(d)
}

// duration formats a duration to the second: <1s, 5s, 2m05s, 1h02m03s.
func duration(d time.Duration) string {
	if d > 0 && d < time.Second {
		return "<1s"
	}
	d = d.Round(time.Second)
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%02ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm%02ds", m, s)
	default:
		return fmt.Sprintf("%ds", s)
	}
}

// cut shortens s to width runes (a wide character counts as one, as a
// narrow one does); 0 is no limit.
func cut(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	return string([]rune(s)[:width])
}
