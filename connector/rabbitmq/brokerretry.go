package rabbitmq

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
)

// DeadLetter returns the dead-letter sink to give the pipeline
// (pipeline.WithDeadLetter) so that the retry topology can work: it is
// how the source learns that an item failed transiently after the
// in-process layers gave up, which an item's outcome alone cannot say.
//
// For an envelope of an item that came from this source (a [Message], a
// []Message from a Batch, or an item whose [deadletter.Correlated] id is a
// Message's), with the retry topology enabled, the sink:
//
//   - records "retry at the broker" on the delivery and writes nothing,
//     when the Classifier of [RetryTopology] judges the failure transient
//     and the message went through the retry queue fewer than MaxRetry
//     times: the source then sends a copy that carries the calls made so
//     far (see [HeaderAttempts]) into the retry topology and acks the
//     message, and the broker delivers the copy after the delay of the
//     trip's tier (see [RetryTopology]);
//   - writes nothing when the delivery's channel is already gone: the
//     broker has put the message back in the queue, and its next delivery
//     is judged again;
//   - otherwise writes the envelope to next, and the message is acked. The
//     envelope of a single message tells every delivery's calls: Attempts,
//     History, FirstFailure and OriginNode come from the first.
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
		panic("sluice: rabbitmq: Source.DeadLetter: next sink is nil")
	}
	return &broker.RetrySink[*delivery]{Source: retrier{s}, Next: next, Poison: ErrPoison}
}

// retrier is the source's part in its retry sink: its retry topology.
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

func (r retrier) Merge(d *delivery, env deadletter.Envelope) deadletter.Envelope {
	return d.past.merge(env)
}

func (r retrier) Enabled() bool { return r.src.cfg.Retry.Enabled }

func (r retrier) Gone(d *delivery) bool { return d.sess.isGone() }

func (r retrier) Transient(err error) bool { return r.src.cfg.Retry.Classifier.IsTransient(err) }

func (r retrier) Exhausted(d *delivery) bool { return d.retries >= r.src.cfg.Retry.MaxRetry }

// Retry sends the copies now, on this goroutine, as any dead-letter write:
// a copy the topology refuses (it is missing or unbound) is an error of
// this write, which the engine retries and then fails the run with,
// saying why; the messages are then not acked, and go back to the queue.
// A delivery already copied by an earlier try is not sent again.
func (r retrier) Retry(ctx context.Context, ds []*delivery, env deadletter.Envelope) error {
	for _, d := range ds {
		if d.copied.Load() {
			continue
		}
		rt := &r.src.cfg.Retry
		tier := rt.tierName(r.src.cfg.Queue, rt.tierForTrip(d.retries+1))
		if err := r.src.copies.publish(ctx, "", tier, *d.retryCopy(env, nil)); err != nil {
			return fmt.Errorf("rabbitmq: send message %s to the retry queue %q of queue %q: %w", d.id, tier, r.src.cfg.Queue, err)
		}
		d.copied.Store(true)
	}
	return nil
}
