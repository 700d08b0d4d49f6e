package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// leakPer builds a series sampled every 5 s over d that starts at base and
// grows by one at each event of seed 1's schedule whose kind is in kinds
// (all kinds when kinds is empty): one goroutine or file leaked per fault.
func leakPer(name string, d time.Duration, base float64, kinds ...string) series {
	evs := schedule(1, d, 15*time.Second)
	s := series{name: name, unit: name, scale: 1, limit: thresholds[name]}
	for at := time.Duration(0); at <= d; at += 5 * time.Second {
		n := 0
		for _, e := range evs {
			if e.At > at {
				break
			}
			if len(kinds) == 0 {
				n++
				continue
			}
			for _, k := range kinds {
				if e.Kind == k {
					n++
				}
			}
		}
		s.values = append(s.values, point{x: at.Hours(), y: base + float64(n)})
	}
	return s
}

// docs/performance.md: the open-files threshold "catches one leaked per
// ETL cycle, or per kill".
func TestFileLeakPerKillFailsTheHour(t *testing.T) {
	s := leakPer("files", time.Hour, 30, faultKill)
	tr := judge(s)
	t.Logf("one file leaked per kill: slope %.1f/h, rise %.1f, ok=%v", tr.slope, tr.rise, tr.ok)
	assert.False(t, tr.ok, "a file leaked per kill passes the one-hour verdict")
}

// make soak's default is SOAK=10m: the floors (the "noise of a short run")
// let a goroutine leaked every 45 s (80 an hour, four times the limit)
// pass, so the default run cannot fail on any leak the docs list.
func TestDefaultTenMinuteRunCatchesAGoroutineLeak(t *testing.T) {
	s := series{name: "goroutines", limit: thresholds["goroutines"]}
	for at := time.Duration(0); at <= 10*time.Minute; at += 5 * time.Second {
		s.values = append(s.values, point{x: at.Hours(), y: 60 + float64(at/(45*time.Second))})
	}
	tr := judge(s)
	t.Logf("80 goroutines/hour over 10m: slope %.1f/h, rise %.1f, ok=%v", tr.slope, tr.rise, tr.ok)
	assert.False(t, tr.ok, "a leak four times the limit passes make soak's default run")
}

// An engine that dead-letters good items (transient failures given up
// on, a sink failing) fails the books, though in = out + dead-lettered:
// the dead-lettered ids must be exactly the seed's poison ids. A poison
// item delivered fails them too.
func TestGoodItemsDeadLetteredFailTheBooks(t *testing.T) {
	fl := newFlaky(1)
	bk := &books{poison: fl.poison}
	const n = 1000
	good, poison := 0, 0
	for id := range n {
		bk.deadLetter(id)
		if fl.poison(id) {
			poison++
		} else {
			good++
		}
	}
	a := bk.account("kafka", n, true)
	t.Logf("%d of %d items dead-lettered though not poison; problems: %v", good, n, a.problems())
	assert.NotEmpty(t, a.problems(), "every item dead-lettered, few poison, and the books balance")
	assert.Equal(t, good, a.wrongDead)

	exact := &books{poison: fl.poison}
	for id := range n {
		if fl.poison(id) {
			exact.deadLetter(id)
		} else {
			exact.deliver(id)
		}
	}
	assert.Empty(t, exact.account("kafka", n, true).problems(), "exactly the poison ids dead-lettered")
	assert.Positive(t, poison, "seed 1 has poison ids below 1000")

	swapped := &books{poison: fl.poison}
	for id := range n {
		if fl.poison(id) {
			swapped.deliver(id)
		} else {
			swapped.deadLetter(id)
		}
	}
	assert.Equal(t, n, swapped.account("kafka", n, true).wrongDead, "every fate wrong by id, the count of each the same as ever")
}
