package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReport(t *testing.T) {
	var samples []sample
	for i := range 80 { // enough samples in each window to judge
		samples = append(samples, sample{at: time.Duration(i) * 5 * time.Second, heap: float64(10<<20 + i<<20), rss: 30 << 20, goroutines: 50, files: 20})
	}
	accounts := []account{
		{pipeline: "kafka", in: 100, out: 98, dead: 2, duplicates: 3, atLeastOnce: true, allowed: 512},
		{pipeline: "etl", in: 50, out: 48, dead: 1},
	}
	res := result{
		cfg:     config{duration: 3 * time.Minute, every: 5 * time.Second, seed: 9, args: []string{"-duration", "3m", "-seed", "9"}},
		start:   time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC),
		elapsed: 200 * time.Second, samples: samples,
		faults: map[string]int{faultKill: 2, faultLatency: 1}, etlCycles: 4,
	}
	res.verdict = decide(accounts, seriesOf(samples))
	dir := t.TempDir()
	require.NoError(t, writeReport(dir, res))

	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	text := string(md)
	assert.True(t, strings.HasPrefix(text, "# Soak report: FAIL"), "a lost row and a growing heap fail it")
	assert.Contains(t, text, "`go run ./bench/soak -duration 3m -seed 9`")
	assert.Contains(t, text, "seed: 9")
	assert.Contains(t, text, "kill 2, latency 1")
	assert.Contains(t, text, "| kafka | 100 | 98 | 2 | 0 | 3 | at least once (duplicates counted, at most 512 explained)")
	assert.Contains(t, text, "| etl | 50 | 48 | 1 | 1 | 0 | exactly once expected |")
	assert.Contains(t, text, "etl: 50 in, 48 out + 1 dead-lettered: 1 lost")
	assert.Contains(t, text, "heap grows")
	assert.Contains(t, text, "| heap (MB) | 10.0 | 89.0 |")
	assert.NotContains(t, text, "kafka: 3 duplicates", "3 duplicates of 512 explained")
	assert.NotContains(t, text, "too short")
	for _, name := range []string{"heap", "rss", "goroutines", "files"} {
		assert.Contains(t, text, "!["+name+"]("+name+".svg)")
		svg, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		require.NoError(t, err)
		poly, _, _ := svgDoc(t, string(svg))
		assert.Len(t, poly, len(samples), name)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "samples.csv"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	assert.Len(t, lines, 1+len(samples))
	assert.Equal(t, "5.0,11534336,31457280,50,20", lines[2])
}

// -judge reads a run's samples.csv and writes the report again, by the
// rule of this binary: the measured hour passes it; one of its samples
// made to leak fails it; a file that is not samples fails clearly.
func TestRejudge(t *testing.T) {
	out := t.TempDir()
	v, err := rejudge("testdata/review-1h-samples.csv", out, time.Hour)
	require.NoError(t, err)
	assert.True(t, v.ok(), "%v", v.problems)
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "# Soak report: PASS")
	assert.Contains(t, string(md), "judged again")
	assert.NotContains(t, string(md), "## Items", "the books are not in a samples file")
	for _, f := range []string{"heap.svg", "rss.svg", "goroutines.svg", "files.svg", "samples.csv"} {
		assert.FileExists(t, filepath.Join(out, f))
	}
	again, err := readSamples(filepath.Join(out, "samples.csv"))
	require.NoError(t, err)
	orig, err := readSamples("testdata/review-1h-samples.csv")
	require.NoError(t, err)
	assert.Equal(t, orig, again, "samples.csv written back as read")

	leaky := filepath.Join(t.TempDir(), "samples.csv")
	var b strings.Builder
	b.WriteString("seconds,heap_bytes,rss_bytes,goroutines,open_files\n")
	for _, s := range orig {
		fmt.Fprintf(&b, "%.1f,%.0f,%.0f,%.0f,%.0f\n", s.at.Seconds(), s.heap, s.rss, s.goroutines+120*s.at.Hours(), s.files)
	}
	require.NoError(t, os.WriteFile(leaky, []byte(b.String()), 0o644))
	v, err = rejudge(leaky, t.TempDir(), time.Hour)
	require.NoError(t, err)
	assert.False(t, v.ok())
	_, err = rejudge(leaky, t.TempDir(), 0)
	assert.ErrorContains(t, err, "-judge needs the run's -duration")

	bad := filepath.Join(t.TempDir(), "x.csv")
	require.NoError(t, os.WriteFile(bad, []byte("seconds,heap_bytes,rss_bytes,goroutines,open_files\n1,2,x,4,5\n"), 0o644))
	_, err = rejudge(bad, t.TempDir(), time.Hour)
	assert.ErrorContains(t, err, "line 2, field rss_bytes")
	_, err = rejudge(filepath.Join(t.TempDir(), "none.csv"), t.TempDir(), time.Hour)
	assert.Error(t, err)
}

func TestInterruptedReportIsNoPass(t *testing.T) {
	res := result{interrupted: true, faults: map[string]int{}}
	res.verdict.problems = []string{"interrupted"}
	md := reportText(res, nil)
	assert.Contains(t, md, "# Soak report: INTERRUPTED (not a PASS)")
}
