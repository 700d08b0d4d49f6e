// Command retrydelay prints a tour of Sluice's backoff curves: the delay
// table of each curve for the first retries, and how each jitter spreads a
// delay, drawn from a seeded source so that two runs print the same.
//
//	go run ./samples/retrydelay
//	go run ./samples/retrydelay -retries 10 -samples 100000 -seed 7
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/samples/internal/cli"
)

func main() {
	retries := flag.Int("retries", 8, "how many retries to tabulate")
	samples := flag.Int("samples", 20000, "how many jittered delays to draw per jitter")
	seed := flag.Uint64("seed", 1, "seed of the jitter's random source")
	flag.Parse()
	var err error
	switch {
	case *retries < 1:
		err = fmt.Errorf("-retries %d: must be at least 1", *retries)
	case *samples < 1:
		err = fmt.Errorf("-samples %d: must be at least 1", *samples)
	default:
		err = cli.NoArgs(flag.Args())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "retrydelay:", err)
		os.Exit(2)
	}
	tour(os.Stdout, *retries, *samples, *seed)
}

type curve struct {
	name string
	b    resilience.Backoff
}

func curves() []curve {
	return []curve{
		{"NoBackoff()", resilience.NoBackoff()},
		{"Constant(500ms)", resilience.Constant(500 * time.Millisecond)},
		{"Linear(250ms)", resilience.Linear(250 * time.Millisecond)},
		{"Exponential(100ms)", resilience.Exponential(100 * time.Millisecond)},
		{"Exponential(100ms).WithMaxDelay(2s)", resilience.Exponential(100 * time.Millisecond).WithMaxDelay(2 * time.Second)},
		{"Exponential(100ms).WithFactor(3)", resilience.Exponential(100 * time.Millisecond).WithFactor(3)},
		{"Custom(fibonacci × 100ms)", resilience.Custom(fibonacci(100 * time.Millisecond))},
	}
}

// fibonacci returns a custom curve: unit × 1, 1, 2, 3, 5, 8, …
func fibonacci(unit time.Duration) func(int) time.Duration {
	return func(n int) time.Duration {
		a, b := 1, 1
		for i := 1; i < n; i++ {
			a, b = b, a+b
		}
		return time.Duration(a) * unit
	}
}

func tour(w io.Writer, retries, samples int, seed uint64) {
	fmt.Fprintln(w, "Sluice backoff tour: the wait before each retry, before jitter (nominal)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "curve\tjitter\t")
	for n := 1; n <= retries; n++ {
		fmt.Fprintf(tw, "retry %d\t", n)
	}
	fmt.Fprintln(tw, "total\t")
	for _, c := range curves() {
		jitter := c.b.Jitter.String()
		if c.b.Kind == resilience.BackoffCustom {
			jitter = "never"
		}
		fmt.Fprintf(tw, "%s\t%s\t", c.name, jitter)
		for n := 1; n <= retries; n++ {
			fmt.Fprintf(tw, "%s\t", short(c.b.Nominal(n)))
		}
		fmt.Fprintf(tw, "%s\t\n", short(c.b.TotalDelay(retries)))
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintf(w, "How each jitter spreads a 1s delay (%d draws, seed %d; each bar is a tenth of the range):\n", samples, seed)
	r := rand.New(rand.NewPCG(seed, seed))
	base := resilience.Constant(time.Second)
	for _, j := range []resilience.Jitter{resilience.JitterNone, resilience.JitterEqual, resilience.JitterFull} {
		fmt.Fprintln(w)
		histogram(w, base.WithJitter(j), j, samples, r)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Full jitter spreads retries over the whole range, so clients that failed together")
	fmt.Fprintln(w, "do not come back together; equal jitter keeps at least half the wait. Read more in")
	fmt.Fprintln(w, "docs/retry-strategies.md.")
}

func histogram(w io.Writer, b resilience.Backoff, j resilience.Jitter, samples int, r resilience.Rand) {
	const bins = 10
	var counts [bins]int
	lo, hi := resilience.MaxDuration, time.Duration(0)
	var sum time.Duration
	for range samples {
		d := b.DelayForRand(1, r)
		lo, hi = min(lo, d), max(hi, d)
		sum += d
		bin := int(d * bins / time.Second)
		counts[min(bin, bins-1)]++
	}
	fmt.Fprintf(w, "jitter %-5s  min %-8s mean %-8s max %s\n", j, short(lo), short(sum/time.Duration(samples)), short(hi))
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	for i, c := range counts {
		bar := strings.Repeat("█", (c*40+most-1)/most)
		if c == 0 {
			bar = ""
		}
		fmt.Fprintf(w, "  %5s–%-5s %6d %s\n", short(time.Duration(i)*time.Second/bins), short(time.Duration(i+1)*time.Second/bins), c, bar)
	}
}

// short formats d rounded for a table: 1.6s, 250ms, 12m0s.
func short(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= resilience.MaxDuration:
		return "max"
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
