package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/samples/internal/inspectpage"
	"github.com/sluicehq/sluice/samples/internal/runname"
)

// summary is what a run did.
type summary struct {
	published, delivered, deadLettered int
	duplicates                         int    // published twice, stored once: absorbed by the stream
	redeliveries                       int    // deliveries after the first of the delivered messages
	earlier                            int    // messages an earlier run left in a kept stream, handled by this one
	kept                               string // the stream left in place, without -keep, as the run ended before its messages did
	itemRetries, handedOff             int64
	publish, consume                   time.Duration
	consumeResult                      pipeline.Result
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "published      %6d messages in %s (each waiting for its PubAck)\n", s.published, s.publish.Round(time.Millisecond))
	fmt.Fprintf(w, "duplicates     %6d messages published twice, stored once by the stream's duplicate window\n", s.duplicates)
	fmt.Fprintf(w, "delivered      %6d messages in %s\n", s.delivered, s.consume.Round(time.Millisecond))
	fmt.Fprintf(w, "dead-lettered  %6d messages, after their last delivery\n", s.deadLettered)
	fmt.Fprintf(w, "item retries   %6d (layer 1), of which %d long waits handed to the server\n", s.itemRetries, s.handedOff)
	fmt.Fprintf(w, "redeliveries   %6d deliveries by the server after a message's first, of delivered messages\n", s.redeliveries)
	if s.earlier > 0 {
		fmt.Fprintf(w, "earlier        %6d messages left in the stream by an earlier run, handled too\n", s.earlier)
	}
	s.printKept(w)
	fmt.Fprintln(w)
	fmt.Fprint(w, s.consumeResult.String())
}

// printKept says, when the run left its stream in place, why and how to
// handle what it holds.
func (s summary) printKept(w io.Writer) {
	if s.kept != "" {
		fmt.Fprintf(w, "kept           stream %q, as its consumer still has messages to deliver: run again with -keep -stream %s (and the same -url) to handle them\n", s.kept, s.kept)
	}
}

// errFlaky is the transient failure the handler simulates.
var errFlaky = errors.New("downstream service unavailable")

// errThrottled is the rate limit the handler simulates.
var errThrottled = errors.New("rate limited")

func run(ctx context.Context, cfg config) (s summary, err error) {
	if err := cfg.validate(); err != nil {
		return s, err
	}
	subject := cfg.stream + ".orders"
	src, err := nats.NewSource(nats.SourceConfig{
		URL: cfg.url, Stream: cfg.stream, Consumer: cfg.stream, Batch: 128,
		Declare:    &nats.StreamDeclaration{Subjects: []string{cfg.stream + ".>"}},
		MaxDeliver: cfg.maxDeliver, BackOff: cfg.backoff,
		// A transient failure after the in-process retries is delivered
		// again after the BackOff wait of its delivery; an in-process retry
		// that would wait at least handOff waits in the server instead,
		// for that wait (for at least BackOff[n-1] - BackOff[0] after its
		// delivery n: the server waits no less after a nak).
		Retry: nats.BrokerRetry{Enabled: true, HandOffAfter: cfg.handOff},
	})
	if err != nil {
		return s, err
	}
	// Opening the source creates the stream and the consumer, so that the
	// messages published next have a stream to go to.
	if err := src.Open(ctx); err != nil {
		return s, err
	}
	if err := src.Close(ctx); err != nil {
		return s, err
	}
	if !cfg.keep {
		defer func() {
			// A run that ended before its messages did (Ctrl-C, a
			// failure) leaves the stream, with what it holds, for a run
			// with -keep: deleting it would drop the messages.
			// So does a run whose consumer still has an earlier run's
			// messages to deliver, waiting out a backoff.
			if s.delivered+s.deadLettered < cfg.n || !deleteStream(cfg.url, cfg.stream, true) {
				s.kept = cfg.stream
			}
		}()
	}

	// The run's messages are named after it: a kept stream's duplicate
	// window would take the same names of a second run for duplicates.
	runID, err := runname.New()
	if err != nil {
		return s, err
	}
	start := time.Now()
	dups, err := publish(ctx, cfg, subject, runID)
	if err != nil {
		return s, err
	}
	s.published, s.duplicates, s.publish = cfg.n+cfg.dupCount(), dups, time.Since(start)

	start = time.Now()
	res, err := consume(ctx, cfg, src, runID, &s)
	s.consume, s.consumeResult = time.Since(start), res
	handle, _ := res.Node("handle")
	s.itemRetries, s.handedOff = handle.ItemRetries, handle.HandedOff
	return s, err
}

// publish sends the run's messages "<run>-msg-0" to "<run>-msg-<n-1>" with
// a Publisher, each with its name as Nats-Msg-Id, waiting for each PubAck,
// several at once; every dup-th message is published twice, as a producer
// that retried would. It returns how many publishes the stream found to be
// duplicates.
func publish(ctx context.Context, cfg config, subject, runID string) (int, error) {
	pub, err := nats.NewPublisher(nats.PublisherConfig[int]{
		URL: cfg.url, Subject: subject,
		Message: func(i int) (*natsgo.Msg, error) {
			return &natsgo.Msg{Data: []byte(runname.Msg(runID, i))}, nil
		},
		MsgID:    func(i int) string { return runname.Msg(runID, i) },
		PubRetry: nats.PubRetry{Enabled: true},
	})
	if err != nil {
		return 0, err
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
		return 0, err
	}
	_, err = pipeline.RunUntilSignal(ctx, p)
	return int(pub.Duplicates()), err
}

// consume runs the messages through a failing handler until each of the
// run's is delivered or dead-lettered, then stops the source, which lets
// the pipeline drain. Messages an earlier run left in a kept stream (it
// was interrupted) come first: they are handled too, and counted apart.
func consume(ctx context.Context, cfg config, src *nats.Source, runID string, s *summary) (pipeline.Result, error) {
	var mu sync.Mutex
	ours := func(m nats.Message) bool { return runname.Of(runID, string(m.Data)) }
	finished := func() {
		if s.delivered+s.deadLettered == cfg.n {
			src.Stop()
		}
	}
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if m, ok := env.Item.(nats.Message); ok && !ours(m) {
			s.earlier++
			return nil
		}
		s.deadLettered++
		finished()
		return nil
	})
	// The stream stored each message once, so the sink needs no guard
	// against the producer's duplicates; a redelivery after a crash can
	// still repeat a write, so a real sink is idempotent
	// (docs/idempotency.md).
	store := node.SinkFunc[nats.Message](func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !ours(m) {
			s.earlier++
			return nil
		}
		s.delivered++
		s.redeliveries += m.Deliveries - 1
		finished()
		return nil
	})
	var slowOnce sync.Map
	handle := node.TransformFunc[nats.Message, nats.Message](func(_ context.Context, m nats.Message) (nats.Message, error) {
		i, _ := runname.Index(string(m.Data))
		switch {
		case cfg.poison > 0 && i%cfg.poison == cfg.poison-1:
			return m, resilience.MarkTransient(errFlaky)
		case cfg.flaky > 0 && i%cfg.flaky == cfg.flaky-1 && m.Deliveries < 3:
			return m, resilience.MarkTransient(errFlaky)
		case cfg.slow > 0 && i%cfg.slow == cfg.slow-1:
			// A rate limit that asks for a long wait, once per message:
			// the wait is handed to the server.
			if _, again := slowOnce.LoadOrStore(m.Sequence, true); !again {
				return m, resilience.RetryAfter(errThrottled, max(cfg.handOff, cfg.backoff[len(cfg.backoff)-1]))
			}
		}
		return m, nil
	})

	ins := inspectpage.New("nats", cfg.inspectAddr, cfg.reportWriter, cfg.inspectorReady)
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
		// redelivery while the message has deliveries left, and hands the
		// rest to dlq.
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

// deleteStream deletes the stream, and with it its consumer, and reports
// whether it did. With ifDone, a stream whose consumer still has messages
// to deliver (an earlier run's, waiting out a backoff) is kept.
func deleteStream(url, stream string, ifDone bool) bool {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ifDone {
		// The sample's consumer is named after its stream.
		c, err := js.Consumer(ctx, stream, stream)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending+uint64(info.NumAckPending) > 0 {
			return false
		}
	}
	return js.DeleteStream(ctx, stream) == nil
}
