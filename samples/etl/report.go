package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// summary is what the job reports when it ends.
type summary struct {
	cfg     config
	res     pipeline.Result
	at      startPoint // where the run started reading
	elapsed time.Duration
	badRows int64 // rows the source could not read as CSV, dead-lettered by it
	letters deadletter.FileStats
	changed int64 // rows inserted or changed by this run
	inTable int64
	totals  totals // as the run left customer_day_totals and day_orders
	reasons []reasonCount
	outages []outage // of the enrich breaker, in order
	drained bool     // the run was drained: it stopped reading, and settled what it read
	stopped error    // the run failed or was cancelled: the counts are partial
}

// node returns the run's counts of the node called name.
func (s summary) node(name string) pipeline.NodeStats {
	n, _ := s.res.Node(name)
	return n
}

// read returns the rows the run read: emitted, or dead-lettered by the
// source when they were not CSV.
func (s summary) read() int64 { return s.node("read").Out + s.badRows }

func (s summary) deadLettered() int64 {
	n := s.badRows
	for _, r := range s.res.Nodes {
		n += r.DeadLettered
	}
	return n
}

func (s summary) retries(k resilience.RetryKind) int64 {
	var n int64
	for _, r := range s.res.Nodes {
		n += r.Retries(k)
	}
	return n
}

func (s summary) print(w io.Writer) {
	read := s.read()
	rate := 0.0
	if s.elapsed > 0 {
		rate = float64(read) / s.elapsed.Seconds()
	}
	fmt.Fprintf(w, "\nSluice ETL demo: %d rows in %s (%s rows/s), run %s\n", read, s.elapsed.Round(10*time.Millisecond), human(rate), s.res.RunID)
	fmt.Fprintf(w, "  %s\n", s.at)
	upTo := s.at.after + read
	switch {
	case s.stopped != nil:
		fmt.Fprintf(w, "  stopped before the end (%v): the counts are partial; the next run resumes after the last row\n  the checkpoint holds, and reads again the rows that had not reached their outcome\n", s.stopped)
	case s.drained:
		fmt.Fprintf(w, "  drained: it stopped reading after row %d of %s, and every row it read reached its outcome;\n  run again to go on from there\n", upTo, rowsOf(s.at.of))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	what := "rows read"
	if read > 0 && s.at.of >= 0 {
		what = fmt.Sprintf("rows read: %d to %d of %d", s.at.after+1, upTo, s.at.of)
	}
	fmt.Fprintf(tw, "  read\t%d\t%s\n", read, what)
	fmt.Fprintf(tw, "  loaded\t%d\tvalid orders upserted into the database\n", s.node("validate").Out)
	fmt.Fprintf(tw, "  changed\t%d\trows this run inserted or changed (%d in the table)\n", s.changed, s.inTable)
	line := "customer-days' order counts and euro totals in customer_day_totals, by each order's own date, gathered by day windows on those dates"
	if s.totals.days > 0 {
		line += fmt.Sprintf(" (largest: %s on %s, %d orders, %s EUR)", s.totals.top, s.totals.topDay, s.totals.topTotal.Orders, euros(s.totals.topTotal.EURCents))
	}
	fmt.Fprintf(tw, "  totals\t%d\t%s\n", s.totals.days, line)
	fmt.Fprintf(tw, "  late\t%d\torders dated before the day windows' watermark, a day behind the latest date: added to their day's total from day_orders (%d in the table)\n",
		s.node("days").Late, s.totals.late)
	fmt.Fprintf(tw, "  dead-lettered\t%d\t\n", s.deadLettered())
	if s.badRows > 0 {
		fmt.Fprintf(tw, "  \t%d\t  not CSV (read)\n", s.badRows)
	}
	for _, r := range s.reasons {
		fmt.Fprintf(tw, "  \t%d\t  %s (%s)\n", r.n, r.why, r.node)
	}
	fmt.Fprintf(tw, "  retries\t%d\titem retries; %d node restarts, %d node retries\n",
		s.retries(resilience.ItemRetry), s.retries(resilience.NodeRestart), s.retries(resilience.NodeRetry))
	s.printOutages(tw)
	tw.Flush()
	fmt.Fprintf(w, "\nOutputs\n  orders        %s (the input)\n  database      %s\n", s.cfg.input, s.cfg.db)
	fmt.Fprintf(w, "  dead letters  %s (%d written by this run", s.cfg.dlq, s.letters.Writes)
	if s.letters.Duplicates > 0 {
		fmt.Fprintf(w, "; %d more the files held already, from a run before", s.letters.Duplicates)
	}
	fmt.Fprintf(w, ")\n                the file holds the letters since the last run that started over; earlier ones' are in %s.000001, ...\n", filepath.Base(s.cfg.dlq))
	if s.cfg.checkpointEvery > 0 {
		fmt.Fprintf(w, "  checkpoint    %s (where the next run resumes; -fresh starts over)\n", s.cfg.checkpoint)
	}
	fmt.Fprintf(w, "  graph         %s (the pipeline as a Mermaid flowchart, with this run's counts)\n", graphPath(s.cfg))
	fmt.Fprintf(w, "\nInspect the dead letters:\n  go run ./cmd/sluice dlq stats %s\n  go run ./cmd/sluice dlq ls %s\n", s.cfg.dlq, s.cfg.dlq)
}

// printOutages writes a line per outage of the enrich breaker: how often
// it opened, how many of its probes failed, and whether it closed. One
// outage of the service opens the breaker once, then once more per failed
// probe, so "opened 6 times" alone would read as six outages.
func (s summary) printOutages(w io.Writer) {
	switch len(s.outages) {
	case 0:
		fmt.Fprintf(w, "  breaker\t0\toutages: the enrich breaker never opened\n")
		return
	case 1:
		fmt.Fprintf(w, "  breaker\t1\toutage: the enrich breaker %s; the job paused while it was open\n", s.outage(s.outages[0]))
		return
	}
	fmt.Fprintf(w, "  breaker\t%d\toutages: the enrich breaker paused the job\n", len(s.outages))
	for i, o := range s.outages {
		fmt.Fprintf(w, "  \t\t  %d: %s\n", i+1, s.outage(o))
	}
}

// outage says what the breaker did in one outage.
func (s summary) outage(o outage) string {
	times := "times"
	if o.opened == 1 {
		times = "time"
	}
	probes := "probes"
	if o.failedProbes == 1 {
		probes = "probe"
	}
	end := "closed"
	if !o.closed {
		end = "not closed (now " + s.node("enrich").Circuit.String() + ")"
	}
	return fmt.Sprintf("opened %d %s (%d failed %s), %s", o.opened, times, o.failedProbes, probes, end)
}

// euros formats cents as euros with a thousands separator: 12,345.67.
func euros(cents int64) string {
	whole := strconv.FormatInt(cents/100, 10)
	for i := len(whole) - 3; i > 0; i -= 3 {
		whole = whole[:i] + "," + whole[i:]
	}
	return fmt.Sprintf("%s.%02d", whole, cents%100)
}

// showProgress reports the run's progress from p's counters with a
// progress.Reporter: on a terminal, a line per node redrawn every
// cfg.progress; otherwise a line every cfg.progress, but no more often
// than every 2 s, since each one stays in a log. It returns a function
// that stops it, after drawing the final counts.
func showProgress(p *pipeline.Pipeline, clock clockwork.Clock, cfg config, w io.Writer) (stop func()) {
	if cfg.progress <= 0 {
		return func() {}
	}
	every := cfg.progress
	if !cfg.tty {
		every = max(every, 2*time.Second)
	}
	r := progress.New(w, progress.WithClock(clock), progress.WithTTY(cfg.tty), progress.WithInterval(every),
		// The compact line: rows read, and orders that passed validation
		// on their way to the database.
		progress.WithLineNodes("read", "validate"))
	if err := r.UseStats(p); err != nil {
		return func() {} // only for a nil pipeline
	}
	r.Start()
	return r.Stop
}

// human formats a rate with a k or M suffix.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
