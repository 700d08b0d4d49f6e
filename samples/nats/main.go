// Command nats shows Sluice's NATS JetStream connector end to end. It
// publishes -n messages to a stream, each with a Nats-Msg-Id and waiting
// for its PubAck (every -dup-th twice, as a producer that retried would:
// the stream's duplicate window stores it once), then consumes them through
// a durable pull consumer and a pipeline whose handler fails now and then:
// every -flaky-th message fails on its first two deliveries, every
// -poison-th always fails, and every -slow-th is rate limited once with a
// long Retry-After. Each failure is first retried in process (item retry);
// a wait of at least -hand-off is handed to the server instead of holding
// a worker (a negative ack with the wait); what still fails is delivered
// again by the server after the consumer's -backoff waits, taken in turn;
// a message that keeps failing ends in the dead-letter sink once the
// server delivered it -max-deliver times. The command prints a summary and
// deletes the stream (unless -keep), once every message of the run was
// handled and its consumer has none left to deliver. Each run names its
// messages after itself ("<run>-msg-<i>", their data and Nats-Msg-Id), so
// that a run on a kept stream is not taken for a duplicate of the one
// before; messages an earlier, interrupted run left in the stream that the
// server delivers while this run consumes are handled too, and counted
// apart ("earlier"); one still waiting out a -backoff delay when the run's
// own are done comes back to a later run.
//
//	go run ./samples/nats                      # a server on 127.0.0.1:4222, with JetStream
//	go run ./samples/nats -url nats://host:4222 -stream DEMO -n 5000
//
// Interrupt it with Ctrl-C: what was in flight goes back to the consumer,
// and the stream is kept, with what it holds (the summary says so): run
// again with -keep -stream NAME to handle it.
// docs/nats.md explains the knobs and how to scale out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/samples/internal/cli"
)

// config is what the flags set.
type config struct {
	url, stream  string
	n            int
	backoff      []time.Duration
	handOff      time.Duration
	maxDeliver   int
	flaky        int
	poison       int
	slow         int
	dup          int
	keep         bool
	publishers   int
	reportWriter io.Writer
	// inspectAddr serves the live inspector page (read-only) of the
	// consuming pipeline; "" serves none. inspectorReady, when not nil, is
	// called with the page's URL once it is served (tests).
	inspectAddr    string
	inspectorReady func(url string)
}

func main() {
	cfg := config{reportWriter: os.Stdout}
	flag.StringVar(&cfg.url, "url", "nats://127.0.0.1:4222", "the server's URL")
	flag.StringVar(&cfg.stream, "stream", "SLUICE_SAMPLE", "the stream to publish to and consume; its subjects are <stream>.>, its consumer is named after it")
	flag.IntVar(&cfg.n, "n", 1000, "how many messages to publish")
	backoff := flag.String("backoff", "1s,3s,10s", "the server's waits before delivering a failed message again, rising, taken in turn; the first is also how long the server waits for an ack")
	flag.DurationVar(&cfg.handOff, "hand-off", 250*time.Millisecond, "an in-process retry that would wait at least this long waits in the server instead (0: never)")
	flag.IntVar(&cfg.maxDeliver, "max-deliver", 4, "how many times the server delivers one message; must exceed the number of -backoff waits")
	flag.IntVar(&cfg.flaky, "flaky", 10, "every flaky-th message fails on its first two deliveries (0: none)")
	flag.IntVar(&cfg.poison, "poison", 97, "every poison-th message always fails (0: none)")
	flag.IntVar(&cfg.slow, "slow", 25, "every slow-th message is rate limited once, with a Retry-After of the longest of -backoff (0: none)")
	flag.IntVar(&cfg.dup, "dup", 50, "every dup-th message is published twice (0: none)")
	flag.IntVar(&cfg.publishers, "publishers", 8, "publishes in flight at once")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the stream at the end")
	flag.StringVar(&cfg.inspectAddr, "inspect-addr", "", "serve the live inspector page of the consuming pipeline (read-only) on this address, such as 127.0.0.1:9465; port 0 picks a free port")
	flag.Parse()
	if err := cli.NoArgs(flag.Args()); err != nil {
		cli.Fail(os.Stderr, "nats", err)
		os.Exit(2)
	}
	var err error
	if cfg.backoff, err = parseDelays(*backoff); err == nil {
		err = cfg.validate()
	}
	if err != nil {
		cli.Fail(os.Stderr, "nats", err)
		os.Exit(2)
	}

	// Each of the sample's two runs (publish, then consume) stops on
	// Ctrl-C with pipeline.RunUntilSignal: the first drains it, so that
	// what was taken in reaches its outcome; a second cancels it.
	var s summary
	s, err = run(context.Background(), cfg)
	printed := errors.Is(err, pipeline.ErrInterrupted) && s.published > 0
	if printed {
		s.print(cfg.reportWriter) // what it consumed before the signal
	}
	if err != nil {
		if !printed {
			s.printKept(os.Stderr)
		}
		cli.Fail(os.Stderr, "nats", err)
		os.Exit(1)
	}
	s.print(cfg.reportWriter)
}

// errConfig reports flags that cannot work.
var errConfig = errors.New("invalid flags")

func (c config) validate() error {
	for i := 1; i < len(c.backoff); i++ {
		if c.backoff[i] <= c.backoff[i-1] {
			return fmt.Errorf("%w: -backoff must rise: %s follows %s", errConfig, c.backoff[i], c.backoff[i-1])
		}
	}
	switch {
	case c.n < 1:
		return fmt.Errorf("%w: -n must be at least 1", errConfig)
	case c.publishers < 1:
		return fmt.Errorf("%w: -publishers must be at least 1", errConfig)
	case c.stream == "" || strings.ContainsAny(c.stream, " \t\r\n.*>/\\"):
		return fmt.Errorf("%w: -stream %q: must be a name without spaces, tabs, '.', '*', '>', '/' or '\\' (it names the stream and its consumer)", errConfig, c.stream)
	case c.handOff < 0:
		return fmt.Errorf("%w: -hand-off must not be negative (0: never)", errConfig)
	case c.flaky < 0 || c.poison < 0 || c.slow < 0 || c.dup < 0:
		return fmt.Errorf("%w: -flaky, -poison, -slow and -dup must not be negative", errConfig)
	case c.maxDeliver <= len(c.backoff):
		return fmt.Errorf("%w: -max-deliver must exceed the number of -backoff waits", errConfig)
	case len(c.backoff) > 0 && c.backoff[0] < 100*time.Millisecond:
		return fmt.Errorf("%w: the first -backoff wait is also the server's ack wait: give it at least 100ms", errConfig)
	case c.flaky > 0 && c.maxDeliver < 3:
		return fmt.Errorf("%w: -flaky needs -max-deliver of at least 3: a flaky message works on its third delivery", errConfig)
	case c.slow > 0 && c.handOff <= 0:
		return fmt.Errorf("%w: -slow needs a -hand-off", errConfig)
	}
	return nil
}

// parseDelays reads a comma-separated list of durations.
func parseDelays(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: -backoff: %w", errConfig, err)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// isDup says whether message i is published twice.
func (c config) isDup(i int) bool { return c.dup > 0 && i%c.dup == c.dup-1 }

// dupCount is how many messages are published twice.
func (c config) dupCount() int {
	if c.dup <= 0 {
		return 0
	}
	return c.n / c.dup
}
