package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// A sample is one reading of the soak process's resources.
type sample struct {
	at         time.Duration // since the start
	rss        float64       // bytes
	heap       float64       // bytes of heap objects, live or not yet swept
	goroutines float64
	files      float64 // open file descriptors
}

// A series is one resource over the run: its name, its unit and its
// readings, with the threshold its growth is judged by.
type series struct {
	name   string
	unit   string // of the values, as shown: "MB", "goroutines", "files"
	scale  float64
	limit  threshold
	values []point
	// quietFrom is when (hours since the start) the schedule's faults
	// stop; 0: quietShare of the last sample's time.
	quietFrom float64
}

// A point is one reading of a series, at hours since the start.
type point struct{ x, y float64 }

// A threshold says how much a series may grow: a least-squares slope over
// a window of one regime (see [windows]; its medians, see [medians])
// above PerHour fails, unless the fitted rise over that window stays
// under Floor scaled to the window (see [floorSpan]), the noise of a run.
type threshold struct {
	PerHour float64 // units per hour
	Floor   float64 // units
}

// thresholds are the soak's limits, in the unit each series is shown in.
// docs/performance.md gives the reasons.
var thresholds = map[string]threshold{
	"heap":       {PerHour: 16, Floor: 8},  // MB
	"rss":        {PerHour: 48, Floor: 24}, // MB
	"goroutines": {PerHour: 20, Floor: 10}, // goroutines
	"files":      {PerHour: 10, Floor: 5},  // open files
}

// fit returns the least-squares slope and intercept of pts; 0, 0 with
// fewer than two points or a single x.
func fit(pts []point) (slope, intercept float64) {
	n := float64(len(pts))
	if n < 2 {
		if n == 1 {
			return 0, pts[0].y
		}
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for _, p := range pts {
		sx += p.x
		sy += p.y
		sxx += p.x * p.x
		sxy += p.x * p.y
	}
	d := n*sxx - sx*sx
	if d == 0 || math.IsNaN(d) {
		return 0, sy / n
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n
}

// quietShare is the share of a run after which the schedule starts no
// fault (see [schedule]): the run has two regimes, faults then quiet, and
// a fit across the change reads the step as a trend.
const quietShare = 0.75

// floorSpan is the window (in hours) over which a threshold's Floor is
// allowed in full: the second half of a one-hour run's fault period. A
// shorter window is allowed the floor in proportion, so that a short run
// still fails a leak at about Floor/floorSpan per hour.
const floorSpan = 0.375

// minTail is the fewest samples of the quiet tail that are judged.
const minTail = 12

// minSpan is the shortest window judged, in hours: what minTail samples
// span at the default -sample (5 s). Windows shorter than that, of more
// samples taken faster, would judge the collector's sawtooth, not a
// trend, against a floor scaled down to almost nothing.
var minSpan = (55 * time.Second).Hours()

// windows returns the parts of pts that are judged, each within one
// regime: the second half of the fault period (before quietFrom, in
// hours), and the quiet tail from quietFrom, when it has at least
// minTail points. quietFrom <= 0 means quietShare of the last point's x.
func windows(pts []point, quietFrom float64) (faulty, quiet []point) {
	if len(pts) == 0 {
		return nil, nil
	}
	if quietFrom <= 0 {
		quietFrom = quietShare * pts[len(pts)-1].x
	}
	for _, p := range pts {
		switch {
		case p.x >= quietFrom:
			quiet = append(quiet, p)
		case p.x >= quietFrom/2:
			faulty = append(faulty, p)
		}
	}
	if len(quiet) < minTail || quiet[len(quiet)-1].x-quiet[0].x < minSpan {
		quiet = nil
	}
	return faulty, quiet
}

// A trend is the verdict on one series.
type trend struct {
	name  string
	unit  string
	slope float64 // units per hour, over the window judged worst
	rise  float64 // the fitted rise over that window
	floor float64 // the rise allowed over that window
	span  float64 // the window's length, hours
	part  string  // which window: "faults" or "quiet"
	limit threshold
	ok    bool
	// short, when set, says the series had too few samples to be judged
	// (a run too short): the trend then fails, since it checked nothing.
	short string
}

// fitWindows is how many windows a part is summarised in before the fit.
const fitWindows = 12

// medians summarises pts by the median of each window of
// max(3, ⌈len/fitWindows⌉) points in a row (the last may be shorter), at
// the window's middle x, so that a sample taken during a fault (the
// connections cut: fewer goroutines and files for a second) does not tilt
// the fit. Fewer than 6 points are returned as they are.
func medians(pts []point) []point {
	if len(pts) < 6 {
		return pts
	}
	w := max(3, (len(pts)+fitWindows-1)/fitWindows)
	var out []point
	for i := 0; i < len(pts); i += w {
		win := pts[i:min(i+w, len(pts))]
		ys := make([]float64, len(win))
		for j, p := range win {
			ys[j] = p.y
		}
		slices.Sort(ys)
		m := ys[len(ys)/2]
		if len(ys)%2 == 0 {
			m = (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
		}
		out = append(out, point{x: (win[0].x + win[len(win)-1].x) / 2, y: m})
	}
	return out
}

// judgePart fits pts, summarised by medians, against s's threshold.
func judgePart(s series, part string, pts []point) trend {
	slope, _ := fit(medians(pts))
	var span float64
	if len(pts) > 1 {
		span = pts[len(pts)-1].x - pts[0].x
	}
	rise := slope * span
	floor := s.limit.Floor * min(1, span/floorSpan)
	ok := slope <= s.limit.PerHour || rise <= floor
	return trend{name: s.name, unit: s.unit, slope: slope, rise: rise, floor: floor, span: span, part: part, limit: s.limit, ok: ok}
}

// judge fits each regime of s apart (see [windows]) and compares each
// slope with its threshold: the series fails when either part does. The
// trend returned is the failing part, else the one of the larger slope.
//
// A series with fewer than minTail samples in either window fails: a fit
// of a handful of points (or of none) says nothing of growth, and a run
// too short to have them is no soak.
func judge(s series) trend {
	faulty, quiet := windows(s.values, s.quietFrom)
	t := judgePart(s, "faults", faulty)
	if len(faulty) < minTail || t.span < minSpan || quiet == nil {
		nq := 0
		if n := len(s.values); n > 0 {
			from := s.quietFrom
			if from <= 0 {
				from = quietShare * s.values[n-1].x
			}
			for _, p := range s.values {
				if p.x >= from {
					nq++
				}
			}
		}
		t.ok = false
		t.short = fmt.Sprintf("%s: %d samples in the faults window (%s) and %d in the quiet tail, fewer than %d or spanning less than 55s in one: the run is too short to judge its growth", s.name, len(faulty), time.Duration(t.span*float64(time.Hour)).Round(time.Second), nq, minTail)
		return t
	}
	if quiet != nil {
		q := judgePart(s, "quiet", quiet)
		if (!q.ok && t.ok) || (q.ok == t.ok && q.slope > t.slope) {
			t = q
		}
	}
	return t
}

// An account is one pipeline's books: every item it took in came out,
// was dead-lettered, or is missing.
type account struct {
	pipeline string
	in       int // items produced
	out      int // distinct items delivered
	dead     int // distinct items dead-lettered
	both     int // items both delivered and dead-lettered
	strays   int // items seen that were never produced
	// wrongDead counts the items whose fate is not the one expected by
	// id: dead-lettered though not poison (or not malformed), or poison
	// and not dead-lettered.
	wrongDead int
	// duplicates counts deliveries beyond an item's first, deadRepeats
	// dead letters beyond an item's first.
	duplicates  int
	deadRepeats int
	// atLeastOnce says the pipeline's delivery is at-least-once (a broker
	// redelivers what a killed consumer did not commit), so duplicates and
	// repeated dead letters are expected, up to allowed, the most that the
	// run's kills, faults and restarts explain (see [allowance]); elsewhere
	// a duplicate is unexplained.
	atLeastOnce bool
	allowed     int
}

// allowance is the most duplicates (deliveries and dead letters beyond an
// item's first) that events explain in an at-least-once broker pipeline
// of consumers, each holding at most window records polled and not
// committed: each event (a consumer killed or ended, a network fault, a
// failed pipeline run again, and the run's end) may cost every consumer
// its window once for each time its source is started again by layer 2
// (restarts+1 at most within one run). It is a coarse bound: it fails a
// consumer that redelivers far more than its faults explain (every item
// twice, say), not one that loses a window once more than it must.
func allowance(events, consumers, window, restarts int) int {
	return (events + 1) * consumers * window * (restarts + 1)
}

// problems returns what is wrong with a's books; none when they balance.
func (a account) problems() []string {
	var p []string
	if a.in != a.out+a.dead-a.both {
		p = append(p, fmt.Sprintf("%s: %d in, %d out + %d dead-lettered: %d lost", a.pipeline, a.in, a.out, a.dead, a.in-(a.out+a.dead-a.both)))
	}
	if a.strays > 0 {
		p = append(p, fmt.Sprintf("%s: %d items seen that were never produced", a.pipeline, a.strays))
	}
	if a.wrongDead > 0 {
		p = append(p, fmt.Sprintf("%s: %d items dead-lettered that should not be, or not dead-lettered that should (by id)", a.pipeline, a.wrongDead))
	}
	if a.both > 0 {
		p = append(p, fmt.Sprintf("%s: %d items both delivered and dead-lettered", a.pipeline, a.both))
	}
	switch extra := a.duplicates + a.deadRepeats; {
	case extra > 0 && !a.atLeastOnce:
		p = append(p, fmt.Sprintf("%s: %d unexplained duplicates (%d deliveries and %d dead letters beyond an item's first)", a.pipeline, extra, a.duplicates, a.deadRepeats))
	case a.atLeastOnce && extra > a.allowed:
		p = append(p, fmt.Sprintf("%s: %d duplicates (%d deliveries and %d dead letters beyond an item's first), more than the %d the run's kills, faults and restarts explain", a.pipeline, extra, a.duplicates, a.deadRepeats, a.allowed))
	}
	return p
}

// A verdict is the soak's end: its books and its trends.
type verdict struct {
	accounts []account
	trends   []trend
	problems []string
}

func (v verdict) ok() bool { return len(v.problems) == 0 }

func decide(accounts []account, ss []series) verdict {
	v := verdict{accounts: accounts}
	for _, a := range accounts {
		v.problems = append(v.problems, a.problems()...)
	}
	for _, s := range ss {
		t := judge(s)
		v.trends = append(v.trends, t)
		switch {
		case t.short != "":
			v.problems = append(v.problems, t.short)
		case !t.ok:
			v.problems = append(v.problems, fmt.Sprintf("%s grows %.2f %s/hour over the %s window (limit %.0f, rise %.2f > floor %.2f)", t.name, t.slope, t.unit, t.part, t.limit.PerHour, t.rise, t.floor))
		}
	}
	return v
}

// seriesOf turns the samples into the four series, in the units shown.
func seriesOf(samples []sample) []series {
	const mb = 1 << 20
	mk := func(name, unit string, scale float64, get func(sample) float64) series {
		s := series{name: name, unit: unit, scale: scale, limit: thresholds[name]}
		for _, sm := range samples {
			s.values = append(s.values, point{x: sm.at.Hours(), y: get(sm) / scale})
		}
		return s
	}
	return []series{
		mk("heap", "MB", mb, func(s sample) float64 { return s.heap }),
		mk("rss", "MB", mb, func(s sample) float64 { return s.rss }),
		mk("goroutines", "goroutines", 1, func(s sample) float64 { return s.goroutines }),
		mk("files", "files", 1, func(s sample) float64 { return s.files }),
	}
}

// withQuiet sets when the faults stopped (hours since the start) on each
// of ss: a run knows it from its duration, which the drain's samples
// come after; 0 leaves the default (see [windows]).
func withQuiet(ss []series, quietFrom float64) []series {
	for i := range ss {
		ss[i].quietFrom = quietFrom
	}
	return ss
}
