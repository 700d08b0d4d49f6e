package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
)

// A story is what a message's earlier deliveries to a source told, kept
// in process by its stream sequence until its next delivery: the calls it
// had, and where a hand-off left its retries.
type story struct {
	attempts int
	first    time.Time
	origin   string
	history  []deadletter.Attempt
	resume   deadletter.Resume // Node "" for none
	// failures is the runs the message failed that its copies could not
	// count (see Source.keepFailures).
	failures int
}

// merge returns env told from the message's first delivery: the calls of
// the earlier deliveries before its own. Without a story from this source
// each earlier delivery the server counted is taken as one call, the least
// it had.
func (d *delivery) merge(env deadletter.Envelope) deadletter.Envelope {
	p := d.past
	if p == nil {
		env.Attempts += max(d.deliveries-1, 0)
		return env
	}
	env.Attempts += p.attempts
	if len(p.history) > 0 {
		env.History = append(append([]deadletter.Attempt(nil), p.history...), env.History...)
	}
	if !p.first.IsZero() {
		env.FirstFailure = p.first
	}
	if p.origin != "" {
		env.OriginNode = p.origin
	}
	return env
}

// keep records env, told from the first delivery, for the message's next
// delivery to this source.
func (d *delivery) keep(env deadletter.Envelope, resume deadletter.Resume) {
	s := d.src
	if s.nStories.Load() >= maxStories {
		return
	}
	env = d.merge(env)
	h := env.History
	if len(h) > broker.MaxHistory {
		h = h[len(h)-broker.MaxHistory:]
	}
	st := &story{attempts: env.Attempts, first: env.FirstFailure, origin: env.OriginNode,
		history: append([]deadletter.Attempt(nil), h...), resume: resume, failures: d.failures}
	if _, loaded := s.stories.Swap(d.seq, st); !loaded {
		s.nStories.Add(1)
	}
}

// HandOffAfter returns BrokerRetry.HandOffAfter, 0 without Retry: the
// pipeline hands item retries that would wait at least this long to the
// server (deadletter.HandOffSource).
func (s *Source) HandOffAfter() time.Duration {
	if !s.cfg.Retry.Enabled {
		return 0
	}
	return s.cfg.Retry.HandOffAfter
}

// HandOff asks the server to deliver the message again after h.Delay: the
// pipeline then settles it with a nak that carries the delay
// (NakWithDelay), and the source keeps where its retries stand for its
// next delivery (deadletter.HandOffItem). It fails, and the pipeline waits in
// process instead, when the message did not come from a source with
// HandOffAfter, when it had its last delivery (MaxDeliver: the server
// would not deliver it again), or when its connection is gone (the server
// delivers it again after AckWait).
func (m Message) HandOff(_ context.Context, h deadletter.HandOff) error {
	d := m.d
	if d == nil || d.src.HandOffAfter() <= 0 {
		return errors.New("nats: the message's source has no hand-off")
	}
	if m := d.src.cfg.MaxDeliver; m > 0 && d.deliveries >= m {
		// The server would not deliver it again: the wait stays here.
		return fmt.Errorf("nats: message %s had its last delivery (MaxDeliver is %d)", d.id, m)
	}
	if d.sess.isGone() {
		return errors.New("nats: the message's connection is gone: the server delivers it again after AckWait")
	}
	d.keep(h.Envelope, deadletter.Resume{Node: h.Envelope.DecisionNode, Retry: h.Retry, Since: h.Since})
	d.handOff.Store(int64(max(h.Delay, time.Millisecond)))
	return nil
}

// Resumed says where a hand-off left the message's retries, when its
// previous delivery was handed off by this source (deadletter.HandOffItem).
// A message handed off by another process starts its retries afresh.
func (m Message) Resumed() (deadletter.Resume, bool) {
	if m.d == nil || m.d.past == nil || m.d.past.resume.Node == "" {
		return deadletter.Resume{}, false
	}
	return m.d.past.resume, true
}

// UseDeadLetter is how the pipeline gives the source its dead-letter sink,
// for poison messages (deadletter.DeadLetterWriter).
func (s *Source) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	s.letters.Use(sink, base)
}

// Poisoned returns how many poison messages the source dead-lettered.
func (s *Source) Poisoned() int64 { return s.poisoned.Load() }

// poison writes the message of d, which failed MaxDeliveries runs, to the
// pipeline's dead-letter sink and terminates it. An error of the sink
// ends Run: the message is nak'd and comes back.
func (s *Source) poison(ctx context.Context, d *delivery, msg Message) error {
	sink, env := s.poisonLetter(d, msg, d.failures, d.past)
	d.settled.Store(true)
	if sink == nil {
		d.sess.settle(settle{d: d, how: nak})
		return fmt.Errorf("nats: message %s is poison and the pipeline has no dead-letter sink", d.id)
	}
	if err := sink.Write(ctx, env); err != nil {
		d.sess.settle(settle{d: d, how: nak})
		return fmt.Errorf("nats: dead-letter poison message %s: %w", d.id, err)
	}
	s.poisoned.Add(1)
	s.forget(d)
	d.sess.settle(settle{d: d, how: term})
	return nil
}

// poisonRun writes the message of d, whose run just failed and made
// failures runs, MaxDeliveries, to the pipeline's dead-letter sink, on the
// acker (see recount); the acker then terminates it.
func (s *Source) poisonRun(ctx context.Context, d *delivery, failures int) error {
	sink, env := s.poisonLetter(d, d.message(), failures, d.failedRun())
	if sink == nil {
		return fmt.Errorf("nats: message %s is poison and the pipeline has no dead-letter sink", d.id)
	}
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("nats: dead-letter poison message %s: %w", d.id, err)
	}
	s.poisoned.Add(1)
	return nil
}

// poisonLetter returns the dead-letter sink and the poison envelope of
// msg, which failed failures runs, p their story (nil: none told).
func (s *Source) poisonLetter(d *delivery, msg Message, failures int, p *story) (deadletter.Sink, deadletter.Envelope) {
	why := fmt.Errorf("%w: message %s of stream %q failed %d runs; MaxDeliveries is %d",
		ErrPoison, describeMsg(msg), s.cfg.Stream, failures, s.cfg.MaxDeliveries)
	sink, env := s.letters.Letter(msg, messageType, why, d.id, s.cfg.Clock.Now())
	if p != nil {
		// The story its copies carried: each failed run, its node, error
		// and time. The poison letter names the node that failed first.
		env.Attempts = p.attempts
		env.History = append([]deadletter.Attempt(nil), p.history...)
		env.FirstFailure = p.first
		if p.origin != "" {
			env.OriginNode = p.origin
		}
		if n := len(p.history); n > 0 {
			env.LastFailure = p.history[n-1].Time
		}
	}
	env.Attempts = max(env.Attempts, failures)
	return sink, env
}

// DeadLetter returns the dead-letter sink to give the pipeline
// (pipeline.WithDeadLetter) so that the broker's retry can work: it is
// how the source learns that an item failed transiently after the
// in-process layers gave up, which an item's outcome alone cannot say.
//
// For an envelope of an item that came from this source (a [Message], a
// []Message from a Batch, or an item whose [deadletter.Correlated] id is a
// Message's), with Retry enabled, the sink:
//
//   - writes nothing, when the Classifier of [BrokerRetry] judges the
//     failure transient and the server delivered the message fewer than
//     MaxDeliver times: the source naks the message with the wait of its
//     delivery (see [BrokerRetry]), and keeps its story for its next
//     delivery;
//   - writes nothing when the message's connection is gone: the server
//     delivers it again after AckWait, and that delivery is judged again;
//   - otherwise writes the envelope to next, and the message is
//     terminated. The envelope of a single message tells every delivery's
//     calls (see [Message]).
//
// Every other envelope goes to next unchanged; when next is another broker
// source's sink (two broker sources: A.DeadLetter(B.DeadLetter(file))), an
// item next gives back to its broker counts as a broker retry. A batch goes to the broker
// only when each of its messages may still be retried. next must not be
// nil. The sink is a [deadletter.BrokerRetrier]: the pipeline counts an
// item it wrote nothing for as a broker retry (NodeStats.BrokerRetries),
// not as a dead letter.
func (s *Source) DeadLetter(next deadletter.Sink) deadletter.Sink {
	if next == nil {
		panic("sluice: nats: Source.DeadLetter: next sink is nil")
	}
	return &broker.RetrySink[*delivery]{Source: retrier{s}, Next: next, Poison: ErrPoison}
}

// retrier is the source's part in its retry sink: a nak with the wait of
// the delivery.
type retrier struct{ src *Source }

func (r retrier) Deliveries(env deadletter.Envelope) []*delivery {
	return broker.Deliveries(env, r.own, r.lookup)
}

func (r retrier) own(m Message) (*delivery, bool) {
	return m.d, m.d != nil && m.d.src == r.src
}

func (r retrier) lookup(id string) (*delivery, bool) {
	d := r.src.lookup(id)
	return d, d != nil
}

func (r retrier) Merge(d *delivery, env deadletter.Envelope) deadletter.Envelope { return d.merge(env) }

func (r retrier) Enabled() bool { return r.src.cfg.Retry.Enabled }

func (r retrier) Gone(d *delivery) bool { return d.sess.isGone() }

func (r retrier) Transient(err error) bool { return r.src.cfg.Retry.Classifier.IsTransient(err) }

func (r retrier) Exhausted(d *delivery) bool { return d.deliveries >= r.src.cfg.MaxDeliver }

// Retry keeps the story of a single message for its next delivery, and
// sets each delivery's nak delay: the source naks it when its done runs.
func (r retrier) Retry(_ context.Context, ds []*delivery, env deadletter.Envelope) error {
	for _, d := range ds {
		if len(ds) == 1 {
			d.keep(env, deadletter.Resume{})
		}
		d.retry.Store(int64(r.src.cfg.delay(uint64(d.deliveries))))
	}
	return nil
}
