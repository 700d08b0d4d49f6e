package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
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
	return &retrySink{src: s, next: next}
}

type retrySink struct {
	src  *Source
	next deadletter.Sink
}

// pass hands env to next. When next is a broker source's sink too (two
// broker sources chain theirs: A.DeadLetter(B.DeadLetter(file))), next's
// own "retried" is passed on, so that an item next gave back to its broker
// counts as a broker retry, not as a dead letter.
func (r *retrySink) pass(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	if br, ok := r.next.(deadletter.BrokerRetrier); ok {
		return br.WriteOrRetry(ctx, env)
	}
	return false, r.next.Write(ctx, env)
}

// Write decides env's fate as DeadLetter describes.
func (r *retrySink) Write(ctx context.Context, env deadletter.Envelope) error {
	_, err := r.WriteOrRetry(ctx, env)
	return err
}

// WriteOrRetry decides env's fate as DeadLetter describes, and returns
// retried true when the message goes back to the broker instead of to
// next, so that the pipeline counts a broker retry, not a dead letter
// (deadletter.BrokerRetrier).
func (r *retrySink) WriteOrRetry(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	if errors.Is(env.Err, ErrPoison) {
		// The source's own poison letter: its story is merged already, and
		// the broker must not retry it.
		return r.pass(ctx, env)
	}
	ds := r.deliveries(env)
	final := env
	if len(ds) == 1 {
		// What earlier deliveries told: the final failure's story starts
		// at the first delivery. (A batch's envelope tells this delivery's.)
		final = ds[0].past.merge(env)
	}
	if len(ds) == 0 || !r.src.cfg.Retry.Enabled {
		return r.pass(ctx, final)
	}
	gone := true
	for _, d := range ds {
		gone = gone && d.sess.isGone()
	}
	if gone {
		return true, nil
	}
	if !r.retryable(env.Err) {
		return r.pass(ctx, final)
	}
	for _, d := range ds {
		if d.retries >= r.src.cfg.Retry.MaxRetry {
			return r.pass(ctx, final)
		}
	}
	// Send the copies now, on this goroutine, as any dead-letter write: a
	// copy the topology refuses (it is missing or unbound) is an error of
	// this write, which the engine retries and then fails the run with,
	// saying why; the messages are then not acked, and go back to the
	// queue. A delivery already copied by an earlier try is not sent again.
	for _, d := range ds {
		if d.copied.Load() {
			continue
		}
		rt := &r.src.cfg.Retry
		tier := rt.tierName(r.src.cfg.Queue, rt.tierForTrip(d.retries+1))
		if err := r.src.copies.publish(ctx, "", tier, *d.retryCopy(env, nil)); err != nil {
			return false, fmt.Errorf("rabbitmq: send message %s to the retry queue %q of queue %q: %w", d.id, tier, r.src.cfg.Queue, err)
		}
		d.copied.Store(true)
	}
	return true, nil
}

// deliveries returns the deliveries of this source that env's item came
// from, or nil when it came from elsewhere.
func (r *retrySink) deliveries(env deadletter.Envelope) []*delivery {
	var ds []*delivery
	add := func(m Message) bool {
		if m.d == nil || m.d.src != r.src {
			return false
		}
		ds = append(ds, m.d)
		return true
	}
	switch it := env.Item.(type) {
	case Message:
		add(it)
	case *Message:
		if it != nil {
			add(*it)
		}
	case []Message:
		for _, m := range it {
			if !add(m) {
				return nil
			}
		}
	default:
		if env.CorrelationID != "" {
			if d := r.src.lookup(env.CorrelationID); d != nil {
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// retryable judges err as the broker's layer sees it: under the marks
// that only keep the in-process layers from multiplying their retries.
func (r *retrySink) retryable(err error) bool {
	return r.src.cfg.Retry.Classifier.IsTransient(unmark(err))
}

// unmark peels off what made err permanent only for the in-process layers:
// a *resilience.RetryExhaustedError becomes the error of its last attempt,
// and an error marked by resilience.MarkRetried becomes the error it wraps.
func unmark(err error) error {
	for range 8 {
		var re *resilience.RetryExhaustedError
		if errors.As(err, &re) && re.Err != nil {
			err = re.Err
			continue
		}
		if inner, ok := retriedInner(err); ok {
			err = inner
			continue
		}
		break
	}
	return err
}

// retriedInner finds the error wrapped by resilience.MarkRetried in err's
// chain: the mark is the last error of the chain that still carries it.
func retriedInner(err error) (error, bool) {
	if _, ok := resilience.RetriedAttempts(err); !ok {
		return nil, false
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		inner := errors.Unwrap(e)
		if _, ok := resilience.RetriedAttempts(inner); !ok {
			return inner, inner != nil
		}
	}
	return nil, false
}
