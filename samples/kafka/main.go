// Command kafka shows Sluice's Kafka connector end to end. It publishes -n
// orders to a topic with the Publisher (idempotent, acks=all, keyed by
// customer, so each customer's orders keep their order), then consumes
// them as a consumer group with the Source: a pricing step, Keyed by the
// record key so that one customer's orders are priced one at a time and
// in order while others run beside them, fails one order in every -flaky,
// as many of each customer's, on its first attempt (item retry takes it
// again), and each result is
// published to a second topic. A record that does not decode as an order
// (another producer's) fails for good: it goes to the dead-letter sink and
// is passed over. The source commits an offset only once the order at it,
// and every record before it in its partition, was done (priced, or
// dead-lettered). The command prints a summary: the orders published,
// consumed, dead-lettered, retried, and the results published.
//
//	go run ./samples/kafka                          # a cluster in the process (kfake)
//	go run ./samples/kafka -brokers host:9092 -n 5000
//
// Without -brokers it starts franz-go's in-process cluster, so it runs with
// Go alone. Interrupt it with Ctrl-C: what was in flight is read again by
// the group's next member. docs/kafka.md explains the knobs.
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

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/samples/internal/cli"
)

// config is what the flags set.
type config struct {
	brokers      []string
	orders       string
	results      string
	n            int
	customers    int
	partitions   int
	flaky        int
	backoff      time.Duration
	reportWriter io.Writer
	// inspectAddr serves the live inspector page (read-only) of the
	// consuming pipeline; "" serves none. inspectorReady, when not nil, is
	// called with the page's URL once it is served (tests).
	inspectAddr    string
	inspectorReady func(url string)
}

func main() {
	cfg := config{reportWriter: os.Stdout}
	brokers := flag.String("brokers", "", "the cluster's seed brokers, comma-separated; none starts a cluster in the process")
	flag.StringVar(&cfg.orders, "orders", "sluice-sample-orders", "the topic of the orders; created when missing")
	flag.StringVar(&cfg.results, "results", "sluice-sample-results", "the topic of the priced orders; created when missing")
	flag.IntVar(&cfg.n, "n", 1000, "how many orders to publish and price")
	flag.IntVar(&cfg.customers, "customers", 20, "how many customers the orders are spread over (the record keys)")
	flag.IntVar(&cfg.partitions, "partitions", 3, "partitions of a topic the sample creates")
	flag.IntVar(&cfg.flaky, "flaky", 10, "one order in every flaky, as many of each customer's, fails its first pricing (0: none)")
	flag.DurationVar(&cfg.backoff, "backoff", 50*time.Millisecond, "the wait before an order's pricing is tried again")
	flag.StringVar(&cfg.inspectAddr, "inspect-addr", "", "serve the live inspector page of the consuming pipeline (read-only) on this address, such as 127.0.0.1:9465; port 0 picks a free port")
	flag.Parse()
	if err := cli.NoArgs(flag.Args()); err != nil {
		cli.Fail(os.Stderr, "kafka", err)
		os.Exit(2)
	}
	if *brokers != "" {
		cfg.brokers = strings.Split(*brokers, ",")
	}
	if err := cfg.validate(); err != nil {
		cli.Fail(os.Stderr, "kafka", err)
		os.Exit(2)
	}
	if len(cfg.brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka: start a cluster in the process:", err)
			os.Exit(1)
		}
		defer cluster.Close()
		cfg.brokers = cluster.ListenAddrs()
		fmt.Fprintln(cfg.reportWriter, "a kfake cluster in the process, at", strings.Join(cfg.brokers, ","))
	}
	s, err := run(context.Background(), cfg, true)
	if err == nil || s.published > 0 {
		// Not when it failed before it published: a summary of zeros
		// would hide the error below it.
		s.print(cfg.reportWriter)
	}
	if err != nil {
		cli.Fail(os.Stderr, "kafka", err)
		os.Exit(1)
	}
}

// errConfig reports flags that cannot work.
var errConfig = errors.New("invalid flags")

func (c config) validate() error {
	switch {
	case c.n < 1:
		return fmt.Errorf("%w: -n must be at least 1", errConfig)
	case c.customers < 1:
		return fmt.Errorf("%w: -customers must be at least 1", errConfig)
	case c.partitions < 1:
		return fmt.Errorf("%w: -partitions must be at least 1", errConfig)
	case c.flaky < 0:
		return fmt.Errorf("%w: -flaky must not be negative", errConfig)
	case c.backoff < 0:
		return fmt.Errorf("%w: -backoff must not be negative", errConfig)
	case c.orders == "" || c.results == "" || c.orders == c.results:
		return fmt.Errorf("%w: -orders and -results must be two topics", errConfig)
	}
	return nil
}
