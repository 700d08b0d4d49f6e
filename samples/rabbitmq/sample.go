package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/samples/internal/inspectpage"
	"github.com/sluicehq/sluice/samples/internal/runname"
)

// summary is what a run did.
type summary struct {
	published, delivered, deadLettered int
	duplicates                         int    // published twice, written or dead-lettered once: absorbed by the idempotency guards
	brokerRetries                      int    // trips through the retry queues of the delivered messages
	earlier                            int    // messages an earlier run left in a kept queue, handled by this one
	kept                               string // the queue left in place, without -keep, as the run ended before its messages did
	itemRetries, handedOff             int64
	publish, consume                   time.Duration
	consumeResult                      pipeline.Result
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "published      %6d messages in %s (confirmed one by one)\n", s.published, s.publish.Round(time.Millisecond))
	fmt.Fprintf(w, "delivered      %6d messages in %s, each written once\n", s.delivered, s.consume.Round(time.Millisecond))
	fmt.Fprintf(w, "duplicates     %6d messages published twice, skipped by the idempotent sink or dead-letter path\n", s.duplicates)
	fmt.Fprintf(w, "dead-lettered  %6d messages, after their last trip through the retry queues\n", s.deadLettered)
	fmt.Fprintf(w, "item retries   %6d (layer 1), of which %d long waits handed to the broker\n", s.itemRetries, s.handedOff)
	fmt.Fprintf(w, "broker retries %6d trips through the retry queues by delivered messages\n", s.brokerRetries)
	if s.earlier > 0 {
		fmt.Fprintf(w, "earlier        %6d messages left in the queue by an earlier run, handled too\n", s.earlier)
	}
	s.printKept(w)
	fmt.Fprintln(w)
	fmt.Fprint(w, s.consumeResult.String())
}

// printKept says, when the run left its queue in place, why and how to
// handle what it holds.
func (s summary) printKept(w io.Writer) {
	if s.kept != "" {
		fmt.Fprintf(w, "kept           queue %q and its retry queues, as they still hold messages: run again with -keep -queue %s (and the same -url and -delays) to handle them\n", s.kept, s.kept)
	}
}

// errFlaky is the transient failure the handler simulates.
var errFlaky = errors.New("downstream service unavailable")

func run(ctx context.Context, cfg config) (s summary, err error) {
	if err := cfg.validate(); err != nil {
		return s, err
	}
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: cfg.url, Queue: cfg.queue, Prefetch: 128,
		Declare: &rabbitmq.QueueDeclaration{Durable: true},
		// Rising waits, one retry queue each; an in-process retry that
		// would wait at least handOff waits in the broker instead.
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: cfg.maxRetry, Delays: cfg.delays,
			HandOffAfter: cfg.handOff, Durable: true},
	})
	if err != nil {
		return s, err
	}
	// Opening the source declares the queue and its retry topology, so
	// that the messages published next have a queue to go to.
	if err := src.Open(ctx); err != nil {
		return s, err
	}
	if err := src.Close(ctx); err != nil {
		return s, err
	}
	if !cfg.keep {
		defer func() {
			// A run that ended before its messages did (Ctrl-C, a
			// failure) leaves the queue and its retry queues, with what
			// they hold, for a run with -keep: deleting them would drop
			// the messages.
			// So does a run whose queues still hold an earlier run's
			// messages, waiting out a retry delay.
			if s.delivered+s.duplicates+s.deadLettered < cfg.n+cfg.dupCount() ||
				!deleteTopology(cfg.url, cfg.queue, src.Config().Retry, true) {
				s.kept = cfg.queue
			}
		}()
	}

	// The run's messages are named after it: in a kept queue an earlier
	// run's leftovers would otherwise take the names of this run's, and
	// the idempotent sink would skip this run's as their duplicates.
	runID, err := runname.New()
	if err != nil {
		return s, err
	}
	start := time.Now()
	if err := publish(ctx, cfg, runID); err != nil {
		return s, err
	}
	s.published, s.publish = cfg.n+cfg.dupCount(), time.Since(start)

	start = time.Now()
	res, err := consume(ctx, cfg, src, runID, &s)
	s.consume, s.consumeResult = time.Since(start), res
	handle, _ := res.Node("handle")
	s.itemRetries, s.handedOff = handle.ItemRetries, handle.HandedOff
	return s, err
}

// publish sends the run's messages "<run>-msg-0" to "<run>-msg-<n-1>" with
// a Publisher, waiting for each confirm, several at once; every dup-th
// message is published twice, with the same MessageId, as a producer that
// retried would.
func publish(ctx context.Context, cfg config, runID string) error {
	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[int]{
		URL: cfg.url, RoutingKey: cfg.queue,
		Publishing: func(i int) (amqp.Publishing, error) {
			id := runname.Msg(runID, i)
			return amqp.Publishing{MessageId: id, Body: []byte(id), DeliveryMode: amqp.Persistent, ContentType: "text/plain"}, nil
		},
		Confirms: rabbitmq.Confirms{Enabled: true, WaitFor: true},
		PubRetry: rabbitmq.PubRetry{Enabled: true},
	})
	if err != nil {
		return err
	}
	b := pipeline.New("publish")
	numbers := pipeline.Source(b, "numbers", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range cfg.n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
			if cfg.isDup(i) {
				if err := out.Emit(ctx, i); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	pipeline.Sink(b, "publish", numbers, pub, pipeline.Parallel(cfg.publishers))
	p, err := b.Build()
	if err != nil {
		return err
	}
	_, err = pipeline.RunUntilSignal(ctx, p)
	return err
}

// consume runs the messages through a failing handler and an idempotent
// sink until each of the run's is delivered, skipped as a duplicate or
// dead-lettered, then stops the source, which lets the pipeline drain.
// Messages an earlier run left in a kept queue (it was interrupted) come
// first: they are handled too, and counted apart.
func consume(ctx context.Context, cfg config, src *rabbitmq.Source, runID string, s *summary) (pipeline.Result, error) {
	var mu sync.Mutex
	ours := func(m rabbitmq.Message) bool { return runname.Of(runID, m.MessageID) }
	total := cfg.n + cfg.dupCount()
	finished := func() {
		if s.delivered+s.duplicates+s.deadLettered == total {
			src.Stop()
		}
	}
	// The dead-letter path skips duplicates as the sink does: a message
	// published twice that fails for good is dead-lettered once, and its
	// second copy counted as a duplicate.
	deadIDs := map[string]bool{}
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		m, _ := env.Item.(rabbitmq.Message)
		switch {
		case !ours(m):
			s.earlier++
			return nil
		case deadIDs[m.MessageID]:
			s.duplicates++
		default:
			deadIDs[m.MessageID] = true
			s.deadLettered++
		}
		finished()
		return nil
	})
	write := node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !ours(m) {
			s.earlier++
			return nil
		}
		s.delivered++
		s.brokerRetries += m.Retries
		return nil
	})
	// The sink writes each MessageId once: a duplicate is skipped. One
	// process keeps its keys in memory; consumers in many processes share
	// a store in PostgreSQL or Redis (docs/idempotency.md).
	guard := idempotency.Sink(write, idempotency.NewMemory(), func(m rabbitmq.Message) string { return m.MessageID })
	var storeMu sync.Mutex // one write at a time: the guard's count says whether this one was skipped
	store := node.SinkFunc[rabbitmq.Message](func(ctx context.Context, m rabbitmq.Message) error {
		storeMu.Lock()
		defer storeMu.Unlock()
		before := guard.Stats().Duplicates
		if err := guard.Write(ctx, m); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if guard.Stats().Duplicates > before {
			if !ours(m) {
				s.earlier++
				return nil
			}
			s.duplicates++
		}
		finished()
		return nil
	})
	var slowOnce sync.Map
	handle := node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
		i, _ := runname.Index(m.MessageID)
		switch {
		case cfg.poison > 0 && i%cfg.poison == cfg.poison-1:
			return m, resilience.MarkTransient(errFlaky)
		case cfg.flaky > 0 && i%cfg.flaky == cfg.flaky-1 && m.Retries < 2:
			return m, resilience.MarkTransient(errFlaky)
		case cfg.slow > 0 && i%cfg.slow == cfg.slow-1:
			// A rate limit that asks for a long wait (the longest retry
			// queue's), once per message: the wait is handed to the broker.
			if _, again := slowOnce.LoadOrStore(m.MessageID, true); !again {
				return m, resilience.RetryAfter(errThrottled, cfg.delays[len(cfg.delays)-1])
			}
		}
		return m, nil
	})

	ins := inspectpage.New("rabbitmq", cfg.inspectAddr, cfg.reportWriter, cfg.inspectorReady)
	var sink deadletter.Sink = src.DeadLetter(dlq)
	var obs []pipeline.Option
	if ins.In != nil {
		// The inspector lists the dead letters with their history; the
		// source's sink stays a BrokerRetrier through it.
		sink = ins.In.DeadLetterSink(sink)
		obs = append(obs, pipeline.WithObserver(ins.In))
	}
	b := pipeline.New("consume", append(obs,
		// The source's dead-letter sink turns a transient failure into a
		// broker retry while the message has trips left, and hands the rest
		// to dlq.
		pipeline.WithDeadLetter(sink),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Exponential(5 * time.Millisecond).WithMaxDelay(time.Minute)
		}))...)
	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 10 // reconnect when the connection is lost
	}))
	handled := pipeline.Transform(b, "handle", msgs, handle, pipeline.Parallel(8))
	pipeline.Sink(b, "store", handled, store)
	p, err := b.Build()
	if err != nil {
		return pipeline.Result{}, err
	}
	if err := ins.Serve(); err != nil {
		return pipeline.Result{}, err
	}
	res, err := pipeline.RunUntilSignal(ctx, p)
	return res, errors.Join(err, ins.Stop())
}

// errThrottled is the rate limit the handler simulates.
var errThrottled = errors.New("rate limited")

// deleteTopology deletes the queue and what the retry topology declared,
// and reports whether it did. With ifEmpty, a queue that holds messages
// (an earlier run's, waiting out a retry delay) is kept, and so are the
// exchanges.
func deleteTopology(url, queue string, r rabbitmq.RetryTopology, ifEmpty bool) bool {
	conn, err := amqp.Dial(url)
	if err != nil {
		return false
	}
	defer conn.Close()
	// The retry queues first: a message there comes back to the queue.
	for _, q := range append(r.RetryQueues(queue), queue) {
		// A channel each: the broker closes one whose delete it refuses.
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDelete(q, false, ifEmpty, false)
		_ = ch.Close()
		if err != nil {
			return false
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return false
	}
	defer ch.Close()
	_ = ch.ExchangeDelete(queue+"_dlx", false, false)
	_ = ch.ExchangeDelete(queue+"_retry", false, false)
	return true
}
