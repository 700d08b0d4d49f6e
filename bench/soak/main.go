// Command soak runs Sluice's pipelines for a long while under a seeded mix
// of faults and tells whether they lost, duplicated or leaked anything.
//
//	go run ./bench/soak -duration 10m -out soak-report   # what make soak runs
//
// For the duration, together: a broker pipeline (a kafka.Source on
// franz-go's kfake, in a process of its own, consumed through a
// connectortest.Proxy whose toxiproxy toxics a seeded schedule applies
// (latency, bandwidth limits, silent links, resets and partitions), by
// this process and by a child consumer in the same group that the
// schedule SIGKILLs and starts again), the ETL pipeline (CSV to
// SQLite with connector/file and connector/sql, run again and again), and
// between each source and its sink a flaky dependency (transient errors,
// RetryAfter, poison items that are dead-lettered). Every few seconds it
// samples this process's heap, RSS, goroutines and open files. At the end
// it writes a report directory (report.md, an SVG plot of each series,
// samples.csv) and exits 1 when the verdict fails: an item lost, an
// unexplained duplicate, or a series whose least-squares slope over the
// second half of the run is above its threshold (docs/performance.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is what the flags set.
type config struct {
	duration   time.Duration
	every      time.Duration // sampling interval
	seed       uint64
	out        string
	rate       int // items a second into the broker pipeline
	etlRows    int
	faultGap   time.Duration
	drain      time.Duration
	partitions int
	args       []string // the command line, for the report
	judge      string   // a samples.csv to judge again instead of a run
}

func main() {
	if childMain(os.Args[1:]) {
		return
	}
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "how long to run the pipelines")
	flag.DurationVar(&cfg.every, "sample", 5*time.Second, "how often to sample heap, RSS, goroutines and open files")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the fault schedule and of the flaky dependency")
	flag.StringVar(&cfg.out, "out", "soak-report", "directory of the report (created)")
	flag.IntVar(&cfg.rate, "rate", 200, "items a second produced into the broker pipeline")
	flag.IntVar(&cfg.etlRows, "etl-rows", 2000, "rows of each ETL cycle")
	flag.DurationVar(&cfg.faultGap, "fault-gap", 15*time.Second, "the least quiet time between two faults")
	flag.DurationVar(&cfg.drain, "drain", 3*time.Minute, "how long the pipelines may take to finish their items after the duration")
	flag.IntVar(&cfg.partitions, "partitions", 4, "partitions of the broker pipeline's topic")
	flag.StringVar(&cfg.judge, "judge", "", "judge again the samples.csv at this path (no run): writes report.md and the SVGs into -out")
	flag.Parse()
	cfg.args = os.Args[1:]
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if cfg.judge != "" {
		var d time.Duration // the run's, which rejudge requires
		flag.Visit(func(f *flag.Flag) {
			if f.Name == "duration" {
				d = cfg.duration
			}
		})

		v, err := rejudge(cfg.judge, cfg.out, d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
		if !v.ok() {
			fmt.Fprintln(os.Stderr, "soak: FAIL; see", cfg.out+"/report.md")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "soak: PASS; see", cfg.out+"/report.md")
		return
	}
	// SIGINT or SIGTERM ends the run early: faults and children stopped,
	// the temp dir removed, a report of what was sampled, marked
	// interrupted, and exit status 1. A second signal kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	v, err := run(ctx, cfg, func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "soak: %s "+f+"\n", append([]any{time.Now().UTC().Format(time.TimeOnly)}, a...)...)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !v.ok() {
		fmt.Fprintln(os.Stderr, "soak: FAIL; see", cfg.out+"/report.md")
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "soak: PASS; see", cfg.out+"/report.md")
}

// childMain runs the soak's child processes, which the soak starts from
// its own binary with a first argument of -broker or -consumer: it
// returns false for any other command line, and exits the process
// otherwise.
func childMain(args []string) bool {
	if len(args) == 0 || (args[0] != "-broker" && args[0] != "-consumer") {
		return false
	}
	if args[0] == "-broker" {
		exit(brokerMain())
	}
	fs := flag.NewFlagSet("soak -consumer", flag.ExitOnError)
	via := fs.String("via", "", "the address the consumer dials")
	topic := fs.String("topic", "soak", "the topic")
	group := fs.String("group", "soak", "the consumer group")
	seed := fs.Uint64("seed", 1, "seed of the flaky dependency")
	_ = fs.Parse(args[1:])
	exit(consumerMain(*via, *topic, *group, *seed))
	return true
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func (c config) validate() error {
	switch {
	case c.duration <= 0:
		return errors.New("-duration must be positive")
	case c.every <= 0:
		return errors.New("-sample must be positive")
	case c.rate < 10:
		return errors.New("-rate must be at least 10")
	case c.etlRows < 1:
		return errors.New("-etl-rows must be at least 1")
	case c.faultGap <= 0:
		return errors.New("-fault-gap must be positive")
	case c.drain <= 0:
		return errors.New("-drain must be positive")
	case c.partitions < 1:
		return errors.New("-partitions must be at least 1")
	case c.out == "":
		return errors.New("-out: a directory is needed")
	}
	return nil
}

func signalNotify(c chan<- os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }
