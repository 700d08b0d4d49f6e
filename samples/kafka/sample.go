package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/samples/internal/inspectpage"
)

// An order is one customer's order.
type order struct {
	ID       int
	Customer string
	Amount   int
}

// A priced order is an order with its total.
type priced struct {
	order
	Total int
}

// summary is what a run did.
type summary struct {
	published, consumed, retried, results int
	// deadLettered counts the records the pricing could not read (not
	// "id,customer,amount": another producer's), written to the
	// dead-letter sink and passed over.
	deadLettered int
	// outOfOrder counts customers whose orders were priced out of their
	// order: none, since the pricing is Keyed by the record key.
	outOfOrder int
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "published  %6d orders\n", s.published)
	fmt.Fprintf(w, "consumed   %6d orders\n", s.consumed)
	fmt.Fprintf(w, "dead-letter%6d orders that do not decode\n", s.deadLettered)
	fmt.Fprintf(w, "retried    %6d pricings\n", s.retried)
	fmt.Fprintf(w, "results    %6d published\n", s.results)
	fmt.Fprintf(w, "customers priced out of order: %d\n", s.outOfOrder)
}

// encode writes o as "id,customer,amount"; decode reads it back.
func encode(o order) []byte { return fmt.Appendf(nil, "%d,%s,%d", o.ID, o.Customer, o.Amount) }

func decode(b []byte) (order, error) {
	f := strings.Split(string(b), ",")
	if len(f) != 3 {
		return order{}, fmt.Errorf("order %q: want id,customer,amount", b)
	}
	id, err1 := strconv.Atoi(f[0])
	amount, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return order{}, fmt.Errorf("order %q: %w", b, err)
	}
	return order{ID: id, Customer: f[1], Amount: amount}, nil
}

// flakyOrder says whether the order id fails its first pricing: one
// order in every (0: none), and as many of each customer's orders (order
// id is the (id/customers)-th of customer id%customers). The pricing is
// Keyed by the customer, so a flaky order holds its customer's later
// orders for its backoff; choosing id%every == every-1 instead picked
// one customer's orders alone when every and customers share a factor
// (every 20th of 20 customers: all c19's), and that customer's orders,
// up to the source's MaxInFlight, then waited their backoffs one after
// another, 13 s at 50 ms when a Ctrl-C drained the run.
func flakyOrder(id, customers, every int) bool {
	return every > 0 && (id/customers+id%customers)%every == every-1
}

// errFlaky is the pricing's transient failure.
var errFlaky = resilience.MarkTransient(errors.New("pricing service busy"))

// run publishes the orders, then consumes and prices them into the
// results topic, and returns what it did. signals says whether Ctrl-C
// drains the runs (the command) or not (a test).
func run(ctx context.Context, cfg config, signals bool) (summary, error) {
	var s summary
	if err := declare(ctx, cfg); err != nil {
		return s, err
	}
	runPipeline := func(p *pipeline.Pipeline) error {
		var err error
		if signals {
			_, err = pipeline.RunUntilSignal(ctx, p)
		} else {
			_, err = p.Run(ctx)
		}
		return err
	}

	// Publish: each customer's orders in order, since the sink is Keyed by
	// the customer and every record of one key goes to one partition.
	orders := make([]order, cfg.n)
	for i := range orders {
		orders[i] = order{ID: i, Customer: fmt.Sprintf("c%02d", i%cfg.customers), Amount: 1 + i%7}
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[order]{Brokers: cfg.brokers, Topic: cfg.orders,
		PubRetry: kafka.PubRetry{Enabled: true},
		Record: func(o order) (*kgo.Record, error) {
			return &kgo.Record{Key: []byte(o.Customer), Value: encode(o)}, nil
		}})
	if err != nil {
		return s, err
	}
	b := pipeline.New("publish-orders")
	pipeline.Sink(b, "publish", pipeline.Source(b, "orders", pipelinetest.NewSliceSource(orders...)), pub,
		pipeline.Keyed(8, func(o order) string { return o.Customer }))
	p, err := b.Build()
	if err != nil {
		return s, err
	}
	if err := runPipeline(p); err != nil {
		return s, err
	}
	s.published = cfg.n

	// Consume, price and publish the results.
	src, err := kafka.NewSource(kafka.SourceConfig{Brokers: cfg.brokers, Topic: cfg.orders, Group: cfg.orders + "-pricing"})
	if err != nil {
		return s, err
	}
	results, err := kafka.NewPublisher(kafka.PublisherConfig[priced]{Brokers: cfg.brokers, Topic: cfg.results,
		PubRetry: kafka.PubRetry{Enabled: true},
		Record: func(p priced) (*kgo.Record, error) {
			return &kgo.Record{Key: []byte(p.Customer), Value: fmt.Appendf(nil, "%s,%d", encode(p.order), p.Total)}, nil
		}})
	if err != nil {
		return s, err
	}
	var (
		consumed, retried, written atomic.Int64
		deadLettered               atomic.Int64
		mu                         sync.Mutex
		last                       = map[string]int{}
		outOfOrder                 = map[string]bool{}
		tried                      sync.Map
	)
	price := func(_ context.Context, m kafka.Message) (priced, error) {
		o, err := decode(m.Value)
		if err != nil {
			return priced{}, resilience.MarkPermanent(err)
		}
		if flakyOrder(o.ID, cfg.customers, cfg.flaky) {
			if _, again := tried.LoadOrStore(o.ID, true); !again {
				retried.Add(1)
				return priced{}, errFlaky
			}
		}
		consumed.Add(1)
		mu.Lock()
		if prev, ok := last[o.Customer]; ok && prev > o.ID {
			outOfOrder[o.Customer] = true
		}
		last[o.Customer] = o.ID
		mu.Unlock()
		return priced{order: o, Total: o.Amount * 100}, nil
	}
	ins := inspectpage.New("kafka", cfg.inspectAddr, cfg.reportWriter, cfg.inspectorReady)
	// A record that does not decode fails for good: it goes to the
	// dead-letter sink, which counts it (a real one would keep it, such as
	// kafka.DeadLetterPublisher on a topic: docs/kafka.md), and settles, so
	// that its offset is committed and the run goes on past it.
	var dlq deadletter.Sink = deadletter.Func(func(context.Context, deadletter.Envelope) error {
		deadLettered.Add(1)
		return nil
	})
	if ins.In != nil {
		dlq = ins.In.DeadLetterSink(dlq) // the inspector lists the dead letters
	}
	opts := []pipeline.Option{pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(cfg.backoff)
	})}
	if ins.In != nil {
		opts = append(opts, pipeline.WithObserver(ins.In))
	}
	b = pipeline.New("price-orders", opts...)
	msgs := pipeline.Source(b, "orders", src)
	pricedOrders := pipeline.Map(b, "price", msgs, price, pipeline.Keyed(8, kafka.RecordKey))
	pipeline.Sink(b, "results", pricedOrders, countingSink{results, func() {
		if int(written.Add(1)) == cfg.n {
			src.Stop() // every order priced: the source drains and commits
		}
	}}, pipeline.Parallel(8))
	if p, err = b.Build(); err != nil {
		return s, err
	}
	if err := ins.Serve(); err != nil {
		return s, err
	}
	err = errors.Join(runPipeline(p), ins.Stop())
	s.consumed, s.retried, s.results, s.outOfOrder = int(consumed.Load()), int(retried.Load()), int(written.Load()), len(outOfOrder)
	s.deadLettered = int(deadLettered.Load())
	return s, err
}

// countingSink publishes with the Publisher and calls written after each
// result it stored.
type countingSink struct {
	*kafka.Publisher[priced]
	written func()
}

func (c countingSink) Write(ctx context.Context, p priced) error {
	if err := c.Publisher.Write(ctx, p); err != nil {
		return err
	}
	c.written()
	return nil
}

// declare creates the two topics unless they exist.
func declare(ctx context.Context, cfg config) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(cfg.partitions), 1, nil, cfg.orders, cfg.results)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range resp {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.Topic, t.Err)
		}
	}
	return nil
}
