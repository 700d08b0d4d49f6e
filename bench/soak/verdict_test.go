package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// line returns n points over hours, y = base + perHour*x + noise of the
// given amplitude from seed.
func line(n int, hours, base, perHour, noise float64, seed uint64) []point {
	r := rand.New(rand.NewPCG(seed, seed))
	pts := make([]point, n)
	for i := range pts {
		x := hours * float64(i) / float64(max(n-1, 1))
		pts[i] = point{x: x, y: base + perHour*x + noise*(2*r.Float64()-1)}
	}
	return pts
}

func TestFitRecoversTheSlope(t *testing.T) {
	m, c := fit(line(100, 1, 5, 3, 0, 1))
	assert.InDelta(t, 3, m, 1e-9)
	assert.InDelta(t, 5, c, 1e-9)
}

func TestFitDegenerate(t *testing.T) {
	m, c := fit(nil)
	assert.Zero(t, m)
	assert.Zero(t, c)
	m, c = fit([]point{{1, 7}})
	assert.Zero(t, m, "one point has no slope")
	assert.Equal(t, 7.0, c)
	m, c = fit([]point{{1, 2}, {1, 4}})
	assert.Zero(t, m, "a single x has no slope")
	assert.Equal(t, 3.0, c)
	assert.False(t, math.IsNaN(m))
}

func heap(pts []point) series {
	return series{name: "heap", unit: "MB", limit: thresholds["heap"], values: pts}
}

func TestFlatSeriesPasses(t *testing.T) {
	tr := judge(heap(line(720, 1, 40, 0, 2, 1))) // ±2 MB of noise, an hour
	assert.True(t, tr.ok, "slope %.2f", tr.slope)
	assert.Less(t, math.Abs(tr.slope), 3.0, "a window is a quarter or three eighths of the run: its slope is noisier than the half's")
}

func TestLeakingSeriesFails(t *testing.T) {
	tr := judge(heap(line(720, 1, 40, 30, 2, 1))) // 30 MB an hour
	assert.False(t, tr.ok)
	assert.InDelta(t, 30, tr.slope, 3)
	v := decide(nil, []series{heap(line(720, 1, 40, 30, 2, 1))})
	assert.False(t, v.ok())
	require.Len(t, v.problems, 1)
	assert.Contains(t, v.problems[0], "heap grows")
}

// Over two hours the fault window is 45 minutes: a rise of 10% over the
// limit is above the floor there.
func TestJustUnderTheLimitPasses(t *testing.T) {
	tr := judge(heap(line(720, 2, 40, thresholds["heap"].PerHour*0.9, 0, 1)))
	assert.True(t, tr.ok)
	tr = judge(heap(line(720, 2, 40, thresholds["heap"].PerHour*1.1, 0, 1)))
	assert.False(t, tr.ok, "just over the limit, a rise over the floor")
}

// A warm-up ramp in the first half and a spike of noise at the last
// sample do not make a flat run fail.
func TestNoisyEdgesPass(t *testing.T) {
	pts := line(720, 1, 40, 0, 1, 2)
	for i := range 360 { // the first half climbs from 0 to 40 MB
		pts[i].y = 40 * float64(i) / 360
	}
	pts[len(pts)-1].y += 20 // one sample of a GC cycle caught late
	tr := judge(heap(pts))
	assert.True(t, tr.ok, "slope %.2f rise %.2f", tr.slope, tr.rise)
	assert.Less(t, tr.rise, thresholds["heap"].Floor)
}

// A short run's slope, extrapolated to an hour, can be large from noise
// alone: below the floor, scaled to the window, its rise does not fail;
// a leak of a little over Floor/floorSpan an hour does.
func TestShortRunFloor(t *testing.T) {
	short := heap(line(120, 10.0/60, 40, 0, 0.5, 3)) // 10 minutes, flat, ±0.5 MB
	tr := judge(short)
	assert.True(t, tr.ok, "slope %.2f rise %.2f floor %.2f", tr.slope, tr.rise, tr.floor)
	assert.Less(t, tr.floor, thresholds["heap"].Floor, "the floor of a 3.75-minute window is scaled down")
	leak := heap(line(120, 10.0/60, 40, 40, 0.5, 3)) // 40 MB/h: 2.5 MB over the fault window
	tr = judge(leak)
	assert.False(t, tr.ok, "slope %.2f rise %.2f floor %.2f", tr.slope, tr.rise, tr.floor)
}

// A step down where the faults stop (their connections gone) is not a
// trend: each regime is flat, and a leak in either still fails.
func TestStepAtTheQuietTailIsNoTrend(t *testing.T) {
	pts := line(720, 1, 80, 0, 2, 5)
	for i := range pts {
		if pts[i].x < quietShare {
			pts[i].y += 45
		}
	}
	g := series{name: "goroutines", unit: "goroutines", limit: thresholds["goroutines"], values: pts}
	tr := judge(g)
	assert.True(t, tr.ok, "slope %.2f over %s", tr.slope, tr.part)
	raw, _ := fit(medians(secondHalf(pts)))
	assert.Less(t, raw, -60.0, "the fit across the step reads it as a fall")

	up := slices.Clone(pts)
	for i := range up {
		if up[i].x >= quietShare {
			up[i].y += 60 * (up[i].x - quietShare)
		}
	}
	g.values = up
	tr = judge(g)
	assert.False(t, tr.ok, "a leak in the quiet tail alone, slope %.2f", tr.slope)
	assert.Equal(t, "quiet", tr.part)
}

func TestWindows(t *testing.T) {
	pts := line(121, 1, 0, 0, 0, 1) // every 30 s
	faulty, quiet := windows(pts, 0)
	assert.InDelta(t, 0.375, faulty[0].x, 1e-9)
	assert.Less(t, faulty[len(faulty)-1].x, 0.75)
	assert.InDelta(t, 0.75, quiet[0].x, 1e-9)
	faulty, quiet = windows(pts, 0.5)
	assert.InDelta(t, 0.25, faulty[0].x, 1e-9)
	assert.InDelta(t, 0.5, quiet[0].x, 1e-9)
	_, quiet = windows(pts[:20], 0)
	assert.Nil(t, quiet, "a tail of fewer than minTail samples is not judged")
	f, q := windows(nil, 0)
	assert.Nil(t, f)
	assert.Nil(t, q)
}

func TestSeriesOfUnits(t *testing.T) {
	ss := seriesOf([]sample{{at: 0, heap: 2 << 20, rss: 4 << 20, goroutines: 10, files: 7}, {at: 30 * time.Minute, heap: 2 << 20, rss: 4 << 20, goroutines: 10, files: 7}})
	require.Len(t, ss, 4)
	assert.Equal(t, []point{{0, 2}, {0.5, 2}}, ss[0].values, "heap in MB, x in hours")
	assert.Equal(t, 4.0, ss[1].values[0].y)
	assert.Equal(t, 10.0, ss[2].values[0].y)
	assert.Equal(t, 7.0, ss[3].values[0].y)
	for _, s := range ss {
		assert.NotZero(t, s.limit.PerHour, "%s has a threshold", s.name)
		assert.NotEmpty(t, judge(s).short, "two samples judge nothing")
	}
}

func TestAccounts(t *testing.T) {
	for _, c := range []struct {
		name string
		a    account
		want string // a problem's text; "" for none
	}{
		{"balanced", account{pipeline: "p", in: 10, out: 8, dead: 2}, ""},
		{"empty", account{pipeline: "p"}, ""},
		{"lost", account{pipeline: "p", in: 10, out: 8, dead: 1}, "1 lost"},
		{"more out than in", account{pipeline: "p", in: 10, out: 10, dead: 1}, "-1 lost"},
		{"unexplained duplicate", account{pipeline: "p", in: 10, out: 10, duplicates: 1}, "1 unexplained duplicates"},
		{"at-least-once duplicates", account{pipeline: "p", in: 10, out: 10, duplicates: 5, atLeastOnce: true, allowed: 5}, ""},
		{"at-least-once, more than explained", account{pipeline: "p", in: 10, out: 10, duplicates: 5, atLeastOnce: true, allowed: 4}, "more than the 4"},
		{"delivered and dead", account{pipeline: "p", in: 10, out: 10, dead: 1, both: 1}, "both delivered and dead-lettered"},
		{"stray", account{pipeline: "p", in: 10, out: 10, strays: 1}, "never produced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.a.problems()
			v := decide([]account{c.a}, nil)
			if c.want == "" {
				assert.Empty(t, p)
				assert.True(t, v.ok())
				return
			}
			require.NotEmpty(t, p)
			assert.Contains(t, p[0], c.want)
			assert.False(t, v.ok())
		})
	}
}

func TestBooks(t *testing.T) {
	b := books{poison: func(id int) bool { return id == 3 }}
	b.reserve(4)
	for _, id := range []int{0, 1, 1, 2, 9} { // 9 grows the books past the reserve
		b.deliver(id)
	}
	b.deadLetter(3)
	b.deadLetter(3)
	b.deliver(-1) // a message without an id counts nowhere
	assert.Equal(t, 5, b.done())

	a := b.account("k", 10, true)
	assert.Equal(t, account{pipeline: "k", in: 10, out: 4, dead: 1, duplicates: 1, deadRepeats: 1, atLeastOnce: true}, a)
	assert.Contains(t, a.problems()[0], "5 lost", "4, 5, 6, 7, 8 never came")

	a = b.account("k", 5, false)
	assert.Equal(t, 1, a.strays, "item 9 was never produced")
	assert.Len(t, a.problems(), 3, "item 4 lost, item 9 a stray, item 1 twice")

	b.deadLetter(0)
	a = b.account("k", 10, true)
	assert.Equal(t, 1, a.both)
	assert.Equal(t, 1, a.wrongDead, "item 0 is not poison")
}

// A consumer that delivers every item twice, with no kill or fault to
// explain it, fails the books, though it is at-least-once; the same
// duplicates within what the run's events explain pass.
func TestDuplicatesBeyondTheAllowanceFail(t *testing.T) {
	b := &books{}
	for id := range 1000 {
		b.deliver(id)
		b.deliver(id)
	}
	a := b.account("kafka", 1000, true)
	a.allowed = allowance(0, 2, 256, 0)
	require.Equal(t, 512, a.allowed, "the run's end: a window of each consumer")
	p := a.problems()
	require.Len(t, p, 1)
	assert.Contains(t, p[0], "1000 duplicates")
	a.allowed = allowance(1, 2, 256, 1) // one kill, one restart each
	assert.Empty(t, a.problems(), "2048 explained")
}

// A poison item dead-lettered three times counts two duplicates: an error
// where delivery is exactly once, within the allowance where it is at
// least once.
func TestRepeatedDeadLettersCount(t *testing.T) {
	b := &books{poison: func(id int) bool { return id == 7 }}
	for id := range 10 {
		if id == 7 {
			b.deadLetter(id)
			b.deadLetter(id)
			b.deadLetter(id)
			continue
		}
		b.deliver(id)
	}
	a := b.account("kafka", 10, true)
	assert.Equal(t, 2, a.deadRepeats)
	assert.Equal(t, 1, a.dead)
	assert.NotEmpty(t, a.problems(), "no event explains them")
	a.allowed = 2
	assert.Empty(t, a.problems())
	a = b.account("etl", 10, false)
	assert.NotEmpty(t, a.problems(), "exactly once expected")
}

// The ETL books go by id: a good row missing from the table fails them
// even when a malformed row dead-lettered twice makes the counts balance
// (found by review: counts alone passed it).
func TestETLBooksByID(t *testing.T) {
	const rows, every = 200, 50
	stored := map[int]bool{}
	dead := map[int]int{}
	for id := range rows {
		if id%every == every-1 {
			dead[id] = 1
		} else {
			stored[id] = true
		}
	}
	assert.Empty(t, etlBooks(rows, every, stored, dead).problems(), "every good row stored, every malformed one dead-lettered once")

	delete(stored, 5)
	dead[49] = 2
	a := etlBooks(rows, every, stored, dead)
	assert.Equal(t, rows, a.in)
	assert.Equal(t, rows-4-1, a.out)
	assert.Equal(t, 4, a.dead, "distinct ids")
	assert.Equal(t, 1, a.deadRepeats)
	p := a.problems()
	require.Len(t, p, 2)
	assert.Contains(t, p[0], "1 lost")
	assert.Contains(t, p[1], "unexplained duplicates")

	stored[5], dead[49] = true, 1
	stored[49] = true // stored and dead-lettered
	stored[rows] = true
	dead[-1] = 1
	a = etlBooks(rows, every, stored, dead)
	assert.Equal(t, 1, a.both)
	assert.Equal(t, 1, a.strays)
	assert.Equal(t, 1, a.wrongDead, "a dead letter that is not a row read")
}

// A run too short to have minTail samples in each window judges nothing,
// and so fails: 20 s applies no fault and samples 5 times, and a series
// growing 4 000 goroutines and 400 MB in that time passed before.
func TestShortRunIsNoVerdict(t *testing.T) {
	d := 20 * time.Second
	assert.Empty(t, schedule(1, d, 15*time.Second), "no fault in 20 s with a gap of 15 s")
	var ss []sample
	for i := 0; i <= 4; i++ {
		ss = append(ss, sample{at: time.Duration(i) * 5 * time.Second, goroutines: float64(15 + 1000*i), files: 16, heap: float64(i * 100 << 20), rss: 30 << 20})
	}
	v := decide(nil, withQuiet(seriesOf(ss), (d*3/4).Hours()))
	assert.False(t, v.ok())
	require.Len(t, v.problems, 4, "each series")
	for _, p := range v.problems {
		assert.Contains(t, p, "too short to judge")
	}
	// Flat series, as long as the shortest judged run: enough samples.
	ss = nil
	for i := range 49 { // 4 minutes at 5 s
		ss = append(ss, sample{at: time.Duration(i) * 5 * time.Second, goroutines: 15, files: 16, heap: 1 << 20, rss: 30 << 20})
	}
	v = decide(nil, withQuiet(seriesOf(ss), (4*time.Minute*3/4).Hours()))
	assert.True(t, v.ok(), "%v", v.problems)
}

func TestConfigValidate(t *testing.T) {
	good := config{duration: time.Minute, every: time.Second, rate: 10, etlRows: 1, faultGap: time.Second, drain: time.Second, partitions: 1, out: "x"}
	require.NoError(t, good.validate())
	for name, f := range map[string]func(*config){
		"duration": func(c *config) { c.duration = 0 }, "sample": func(c *config) { c.every = -1 },
		"rate": func(c *config) { c.rate = 9 }, "etl-rows": func(c *config) { c.etlRows = 0 },
		"fault-gap": func(c *config) { c.faultGap = 0 }, "drain": func(c *config) { c.drain = 0 },
		"partitions": func(c *config) { c.partitions = 0 }, "out": func(c *config) { c.out = "" },
	} {
		c := good
		f(&c)
		err := c.validate()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "-"+name)
	}
}

// A fault cuts every connection for a second: a sample then shows fewer
// goroutines and files. Faults in the first part of the second half and
// none at its end (the quiet last quarter) would tilt a plain fit; the
// window medians do not.
func TestDipsDoNotTiltTheFit(t *testing.T) {
	pts := line(720, 1, 130, 0, 3, 4)
	for i := 360; i < 540; i += 7 {
		pts[i].y = 30
	}
	g := series{name: "goroutines", unit: "goroutines", limit: thresholds["goroutines"], values: pts}
	raw, _ := fit(secondHalf(pts))
	assert.Greater(t, raw, thresholds["goroutines"].PerHour, "a plain fit would fail it")
	tr := judge(g)
	assert.True(t, tr.ok, "slope %.2f", tr.slope)
	assert.Less(t, math.Abs(tr.slope), 5.0)

	// A real leak among the dips still fails.
	for i := range pts {
		pts[i].y += 100 * pts[i].x
	}
	assert.False(t, judge(g).ok)
}

func TestMedians(t *testing.T) {
	assert.Equal(t, []point{{0, 1}, {1, 9}}, medians([]point{{0, 1}, {1, 9}}), "too few to summarise")
	got := medians([]point{{0, 1}, {1, 100}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}})
	assert.Equal(t, []point{{1, 3}, {4, 5}, {6, 7}}, got, "windows of 3, the last shorter")
	even := medians([]point{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}})
	assert.Equal(t, point{6.5, 7.5}, even[len(even)-1], "the median of two is their mean")
	assert.Len(t, medians(line(360, 1, 0, 0, 0, 1)), fitWindows)
}

// secondHalf returns the points after the first half of the run: the
// window of the soak's first, plain fit.
func secondHalf(pts []point) []point { return pts[len(pts)/2:] }

// A run whose windows last less than a minute is too short to judge,
// however fast it samples: a one-minute run sampled every second got a
// verdict, and a flat heap with the collector's ±2 MB failed it in 11
// seeds of 20, against a floor scaled down to 0.12 MB (a review's
// finding).
func TestOneMinuteRunSampledEverySecondIsTooShort(t *testing.T) {
	s := heap(line(63, 63.0/3600, 40, 0, 2, 7)) // 63 samples a second apart, flat, ±2 MB
	tr := judge(withQuiet([]series{s}, (45 * time.Second).Hours())[0])
	assert.False(t, tr.ok)
	assert.Contains(t, tr.short, "too short to judge")
	// The same minute-long windows sampled as densely over four minutes
	// are judged: the bound is the time, not the count.
	long := heap(line(241, 241.0/3600, 40, 0, 0.01, 7))
	tr = judge(withQuiet([]series{long}, (180 * time.Second).Hours())[0])
	assert.Empty(t, tr.short)
	assert.True(t, tr.ok, "slope %.2f rise %.2f floor %.2f", tr.slope, tr.rise, tr.floor)
}
