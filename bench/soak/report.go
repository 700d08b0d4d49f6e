package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// writeReport writes res into dir: report.md, one SVG per series and
// samples.csv.
func writeReport(dir string, res result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ss := withQuiet(seriesOf(res.samples), res.quietFrom)
	for _, s := range ss {
		f, err := os.Create(filepath.Join(dir, s.name+".svg"))
		if err != nil {
			return err
		}
		werr := writeSVG(f, s, fmt.Sprintf("%s (%s) over the run; dashed: the fits of the fault window and the quiet tail", s.name, s.unit))
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return werr
		}
	}
	var csv strings.Builder
	csv.WriteString("seconds,heap_bytes,rss_bytes,goroutines,open_files\n")
	for _, s := range res.samples {
		fmt.Fprintf(&csv, "%.1f,%.0f,%.0f,%.0f,%.0f\n", s.at.Seconds(), s.heap, s.rss, s.goroutines, s.files)
	}
	if err := os.WriteFile(filepath.Join(dir, "samples.csv"), []byte(csv.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(reportText(res, ss)), 0o644)
}

// reportText is report.md.
func reportText(res result, ss []series) string {
	var b strings.Builder
	v := res.verdict
	word := "PASS"
	switch {
	case res.interrupted:
		word = "INTERRUPTED (not a PASS)"
	case !v.ok():
		word = "FAIL"
	}
	fmt.Fprintf(&b, "# Soak report: %s\n\n", word)
	if res.rejudged != "" {
		fmt.Fprintf(&b, "- judged again: the samples of %s, by `go run ./bench/soak %s`; the books (items, duplicates) and the faults are those of the run's own report, not judged here\n", res.rejudged, strings.Join(res.cfg.args, " "))
		fmt.Fprintf(&b, "- samples: %d, over %s\n\n", len(res.samples), res.elapsed.Round(time.Second))
	} else {
		fmt.Fprintf(&b, "- command: `go run ./bench/soak %s`\n", strings.Join(res.cfg.args, " "))
		fmt.Fprintf(&b, "- seed: %d; duration %s (ran %s with the drain); started %s\n", res.cfg.seed, res.cfg.duration, res.elapsed.Round(time.Second), res.start.UTC().Format(time.RFC3339))
		fmt.Fprintf(&b, "- samples: %d, every %s\n", len(res.samples), res.cfg.every)
		kinds := make([]string, 0, len(res.faults))
		for k := range res.faults {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		var fs []string
		for _, k := range kinds {
			fs = append(fs, fmt.Sprintf("%s %d", k, res.faults[k]))
		}
		fmt.Fprintf(&b, "- faults applied: %s\n", strings.Join(fs, ", "))
		fmt.Fprintf(&b, "- the in-process consumer's pipeline run again after it failed: %d times; child consumers that ended by themselves: %d; ETL cycles: %d\n\n", res.restarts, res.childEnds, res.etlCycles)
	}
	if v.ok() {
		if res.rejudged != "" {
			b.WriteString("No series growing past its threshold.\n\n")
		} else {
			b.WriteString("Every item accounted for, no unexplained duplicate, no series growing past its threshold.\n\n")
		}
	} else {
		b.WriteString("Problems:\n\n")
		for _, p := range v.problems {
			fmt.Fprintf(&b, "- %s\n", p)
		}
		b.WriteString("\n")
	}
	if res.rejudged == "" {
		b.WriteString("## Items\n\n| pipeline | in | out | dead-lettered | lost | duplicates | delivery |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, a := range v.accounts {
			d := "exactly once expected"
			if a.atLeastOnce {
				d = fmt.Sprintf("at least once (duplicates counted, at most %d explained)", a.allowed)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s |\n", a.pipeline, a.in, a.out, a.dead, a.in-(a.out+a.dead-a.both), a.duplicates+a.deadRepeats, d)
		}
	}
	b.WriteString("\n## Growth\n\nLeast-squares slope (of window medians) within one regime at a time: the second half of the fault period, and the quiet tail after the faults stop (at three quarters of the duration); a fit never straddles the change. A series fails when, in either window, its slope is above the limit and its fitted rise over that window is above the floor, scaled to the window's length (the full floor over 22.5 minutes or more). The row shows the failing window, else the one of the larger slope.\n\n")
	b.WriteString("| series | first | last | window | slope / hour | rise over window | limit / hour | floor | verdict |\n|---|---:|---:|---|---:|---:|---:|---:|---|\n")
	for i, t := range v.trends {
		var first, last float64
		if vals := ss[i].values; len(vals) > 0 {
			first, last = vals[0].y, vals[len(vals)-1].y
		}
		ok := "ok"
		switch {
		case t.short != "":
			ok = "TOO FEW SAMPLES"
		case !t.ok:
			ok = "GROWS"
		}
		fmt.Fprintf(&b, "| %s (%s) | %s | %s | %s, %.0f min | %+.2f | %+.2f | %.0f | %.2f | %s |\n", t.name, t.unit, num(first), num(last), t.part, t.span*60, t.slope, t.rise, t.limit.PerHour, t.floor, ok)
	}
	b.WriteString("\n")
	for _, s := range ss {
		fmt.Fprintf(&b, "![%s](%s.svg)\n", s.name, s.name)
	}
	return b.String()
}

// rejudge reads a samples.csv that a run wrote (seconds, heap_bytes,
// rss_bytes, goroutines, open_files) and judges its series again by the
// rule of this binary, writing report.md, the SVGs and samples.csv into
// out. The books are not in the file: only the growth is judged.
//
// duration is the run's -duration: the faults stopped at three quarters
// of it. It is required: guessed from the last sample's time, which is
// later by the drain, the faults' end would fall late, and the step down
// when they stopped would land in the faults window, where it could
// cancel a leak (a review's finding).
func rejudge(path, out string, duration time.Duration) (verdict, error) {
	if duration <= 0 {
		return verdict{}, errors.New("-judge needs the run's -duration: the faults stopped at 3/4 of it")
	}
	ss, err := readSamples(path)
	if err != nil {
		return verdict{}, err
	}
	res := result{cfg: config{args: os.Args[1:]}, samples: ss, rejudged: path, quietFrom: (duration * 3 / 4).Hours()}
	if len(ss) > 0 {
		res.elapsed = ss[len(ss)-1].at
	}
	res.verdict = decide(nil, withQuiet(seriesOf(ss), res.quietFrom))
	return res.verdict, writeReport(out, res)
}

// readSamples reads a samples.csv.
func readSamples(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 || len(rows[0]) != 5 || rows[0][0] != "seconds" {
		return nil, fmt.Errorf("%s: not a soak samples.csv (header seconds,heap_bytes,rss_bytes,goroutines,open_files)", path)
	}
	var out []sample
	for i, r := range rows[1:] {
		var v [5]float64
		for j := range v {
			if v[j], err = strconv.ParseFloat(r[j], 64); err != nil {
				return nil, fmt.Errorf("%s: line %d, field %s: %w", path, i+2, rows[0][j], err)
			}
		}
		out = append(out, sample{at: time.Duration(v[0] * float64(time.Second)), heap: v[1], rss: v[2], goroutines: v[3], files: v[4]})
	}
	return out, nil
}
