// Command rabbitmq shows Sluice's RabbitMQ connector end to end. It
// publishes -n messages to a queue with publisher confirms (every -dup-th
// twice, as a producer that retried would), then consumes them through a
// pipeline whose handler fails now and then: every -flaky-th message fails
// on its first two deliveries, every -poison-th always fails, and every
// -slow-th is rate limited once with a long Retry-After. Each failure is
// first retried in-process (item retry); a wait of at least -hand-off is
// handed to the broker instead of holding a worker; what still fails goes
// through the broker's retry queues, one per delay of -delays, taken in
// turn; a message that keeps failing ends in the dead-letter sink after
// -max-retry trips. The sink and the dead-letter path are idempotent: a
// duplicate (the same MessageId) is skipped, so a message published twice
// is written or dead-lettered once, and counted once. The command prints a
// summary and deletes the queue and its topology (unless -keep), once
// every message of the run was handled and the queues are empty. Each run
// names its messages after itself ("<run>-msg-<i>", their body and
// MessageId), so that an earlier run's messages left in a kept queue (it
// was interrupted) are not taken for this run's: those that reach the
// queue while this run consumes are handled too, and counted apart
// ("earlier"); one still waiting out a retry queue's delay when the run's
// own are done comes back to a later run.
//
//	go run ./samples/rabbitmq                      # a broker on 127.0.0.1:5672
//	go run ./samples/rabbitmq -url amqp://user:password@host:5672/ -queue demo -n 5000
//
// Interrupt it with Ctrl-C: what was in flight goes back to the queue, and
// the queue and its retry queues are kept, with what they hold (the summary
// says so): run again with -keep -queue NAME to handle it.
// docs/rabbitmq.md explains the topology and how to scale out.
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
	url, queue   string
	n            int
	delays       []time.Duration
	handOff      time.Duration
	maxRetry     int
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
	flag.StringVar(&cfg.url, "url", "amqp://guest:guest@127.0.0.1:5672/", "the broker's AMQP URI")
	flag.StringVar(&cfg.queue, "queue", "sluice-sample", "the queue to publish to and consume; the retry topology is named after it")
	flag.IntVar(&cfg.n, "n", 1000, "how many messages to publish")
	delays := flag.String("delays", "100ms,500ms,2s", "the broker's waits before redelivering a failed message, rising: one retry queue each, taken in turn")
	flag.DurationVar(&cfg.handOff, "hand-off", 250*time.Millisecond, "an in-process retry that would wait at least this long waits in the broker instead (0: never)")
	flag.IntVar(&cfg.maxRetry, "max-retry", 3, "how many times the broker redelivers one message")
	flag.IntVar(&cfg.flaky, "flaky", 10, "every flaky-th message fails on its first two deliveries (0: none)")
	flag.IntVar(&cfg.poison, "poison", 97, "every poison-th message always fails (0: none)")
	flag.IntVar(&cfg.slow, "slow", 25, "every slow-th message is rate limited once, with a Retry-After of the longest of -delays (0: none)")
	flag.IntVar(&cfg.dup, "dup", 50, "every dup-th message is published twice (0: none)")
	flag.IntVar(&cfg.publishers, "publishers", 8, "publishes in flight at once")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the queue and its topology at the end")
	flag.StringVar(&cfg.inspectAddr, "inspect-addr", "", "serve the live inspector page of the consuming pipeline (read-only) on this address, such as 127.0.0.1:9465; port 0 picks a free port")
	flag.Parse()
	if err := cli.NoArgs(flag.Args()); err != nil {
		cli.Fail(os.Stderr, "rabbitmq", err)
		os.Exit(2)
	}
	var err error
	if cfg.delays, err = parseDelays(*delays); err == nil {
		err = cfg.validate()
	}
	if err != nil {
		cli.Fail(os.Stderr, "rabbitmq", err)
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
		cli.Fail(os.Stderr, "rabbitmq", err)
		os.Exit(1)
	}
	s.print(cfg.reportWriter)
}

// errConfig reports flags that cannot work.
var errConfig = errors.New("invalid flags")

func (c config) validate() error {
	for i, d := range c.delays {
		switch {
		case d < time.Millisecond || d%time.Millisecond != 0:
			return fmt.Errorf("%w: -delays: %s is not a whole number of milliseconds, at least 1ms (a retry queue's message TTL)", errConfig, d)
		case i > 0 && d <= c.delays[i-1]:
			return fmt.Errorf("%w: -delays must rise: %s follows %s (each wait names its retry queue)", errConfig, d, c.delays[i-1])
		}
	}
	switch {
	case c.n < 1:
		return fmt.Errorf("%w: -n must be at least 1", errConfig)
	case c.publishers < 1:
		return fmt.Errorf("%w: -publishers must be at least 1", errConfig)
	case c.flaky < 0 || c.poison < 0 || c.slow < 0 || c.dup < 0:
		return fmt.Errorf("%w: -flaky, -poison, -slow and -dup must not be negative", errConfig)
	case c.queue == "":
		return fmt.Errorf("%w: -queue must not be empty", errConfig)
	case c.maxRetry < 1 || c.maxRetry > 100:
		return fmt.Errorf("%w: -max-retry must be in [1, 100]", errConfig)
	case len(c.delays) == 0 || len(c.delays) > 16:
		return fmt.Errorf("%w: -delays needs 1 to 16 waits", errConfig)
	case c.handOff < 0:
		return fmt.Errorf("%w: -hand-off must not be negative (0: never)", errConfig)
	case c.handOff > c.delays[len(c.delays)-1]:
		return fmt.Errorf("%w: -hand-off must not exceed the longest of -delays (%s): a wait is handed only to a retry queue that waits at least as long", errConfig, c.delays[len(c.delays)-1])
	case c.slow > 0 && c.handOff == 0:
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
			return nil, fmt.Errorf("%w: -delays: %w", errConfig, err)
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
