// Command rabbitmq shows Sluice's RabbitMQ connector end to end. It
// publishes -n messages to a queue with publisher confirms, then consumes
// them through a pipeline whose handler fails now and then: every
// -flaky-th message fails on its first two deliveries, every -poison-th
// always fails. Each failure is first retried in-process (item retry);
// what still fails goes through the broker's retry topology, which hands
// it back after -delay without holding a consumer; a message that keeps
// failing ends in the dead-letter sink after -max-retry trips. The command
// prints a summary and deletes the queue and its topology (unless -keep).
//
//	go run ./samples/rabbitmq                      # a broker on 127.0.0.1:5672
//	go run ./samples/rabbitmq -url amqp://user:password@host:5672/ -queue demo -n 5000
//
// Interrupt it with Ctrl-C: what was in flight goes back to the queue.
// docs/rabbitmq.md explains the topology and how to scale out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// config is what the flags set.
type config struct {
	url, queue   string
	n            int
	delay        time.Duration
	maxRetry     int
	flaky        int
	poison       int
	keep         bool
	publishers   int
	reportWriter io.Writer
}

func main() {
	cfg := config{reportWriter: os.Stdout}
	flag.StringVar(&cfg.url, "url", "amqp://guest:guest@127.0.0.1:5672/", "the broker's AMQP URI")
	flag.StringVar(&cfg.queue, "queue", "sluice-sample", "the queue to publish to and consume; the retry topology is named after it")
	flag.IntVar(&cfg.n, "n", 1000, "how many messages to publish")
	flag.DurationVar(&cfg.delay, "delay", 200*time.Millisecond, "the broker's wait before redelivering a failed message")
	flag.IntVar(&cfg.maxRetry, "max-retry", 3, "how many times the broker redelivers one message")
	flag.IntVar(&cfg.flaky, "flaky", 10, "every flaky-th message fails on its first two deliveries (0: none)")
	flag.IntVar(&cfg.poison, "poison", 97, "every poison-th message always fails (0: none)")
	flag.IntVar(&cfg.publishers, "publishers", 8, "publishes in flight at once")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the queue and its topology at the end")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq:", err)
		os.Exit(1)
	}
	s.print(cfg.reportWriter)
}

// errConfig reports flags that cannot work.
var errConfig = errors.New("invalid flags")

func (c config) validate() error {
	switch {
	case c.n < 1:
		return fmt.Errorf("%w: -n must be at least 1", errConfig)
	case c.publishers < 1:
		return fmt.Errorf("%w: -publishers must be at least 1", errConfig)
	case c.flaky < 0 || c.poison < 0:
		return fmt.Errorf("%w: -flaky and -poison must not be negative", errConfig)
	}
	return nil
}
