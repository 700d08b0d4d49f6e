package main

import (
	"encoding/csv"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// measured reads the samples of the builder's one-hour run (seed 1,
// /work/soak-1h/samples.csv, copied into testdata).
func measured(t *testing.T) []sample {
	f, err := os.Open("testdata/review-1h-samples.csv")
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	var out []sample
	for _, r := range rows[1:] {
		v := make([]float64, 5)
		for i := range v {
			v[i], err = strconv.ParseFloat(r[i], 64)
			require.NoError(t, err)
		}
		out = append(out, sample{at: time.Duration(v[0] * float64(time.Second)), heap: v[1], rss: v[2], goroutines: v[3], files: v[4]})
	}
	return out
}

// The schedule stops its faults at three quarters of the run, and the
// goroutines and files of the one-hour run drop then (about 127 to 82
// goroutines, 56 to 38 files, the faults' connections gone): the fit of
// a fit of the second half straddled that step (-129 goroutines and -52
// files an hour) and passed a real leak of six times the limit; each
// regime judged apart, the leaks below added to the measured run fail.
func TestMeasuredHourCatchesALeak(t *testing.T) {
	ss := measured(t)
	evs := schedule(1, time.Hour, 15*time.Second)
	for _, c := range []struct {
		name string
		leak func(at time.Duration) float64
	}{
		{"goroutines +120/hour", func(at time.Duration) float64 { return 120 * at.Hours() }},
		{"goroutines +1 per fault", func(at time.Duration) float64 {
			n := 0
			for _, e := range evs {
				if e.At <= at {
					n++
				}
			}
			return float64(n)
		}},
		{"files +60/hour", func(at time.Duration) float64 { return 60 * at.Hours() }},
	} {
		leaky := make([]sample, len(ss))
		for i, s := range ss {
			leaky[i] = s
			if c.name[0] == 'g' {
				leaky[i].goroutines += c.leak(s.at)
			} else {
				leaky[i].files += c.leak(s.at)
			}
		}
		v := decide(nil, seriesOf(leaky))
		for _, tr := range v.trends {
			if (c.name[0] == 'g' && tr.name == "goroutines") || (c.name[0] == 'f' && tr.name == "files") {
				t.Logf("%s on the measured hour: slope %+.1f/h, rise %+.1f, ok=%v", c.name, tr.slope, tr.rise, tr.ok)
			}
		}
		assert.False(t, v.ok(), "%s added to the one-hour run passes the verdict", c.name)
	}
}
