package broker

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

// A Retrier is one broker source's part in its [RetrySink]: D is the
// source's delivery of one message.
type Retrier[D any] interface {
	// Deliveries returns the deliveries of this source that env's item
	// came from, or nil when it came from elsewhere (see [Deliveries]).
	Deliveries(env deadletter.Envelope) []D
	// Merge returns env told from the message's first delivery.
	Merge(d D, env deadletter.Envelope) deadletter.Envelope
	// Enabled reports whether the source retries at the broker at all.
	Enabled() bool
	// Gone reports whether d's connection or channel is gone, so that the
	// broker delivers the message again by itself.
	Gone(d D) bool
	// Transient judges a failure as the broker's layer sees it (the
	// error is unmarked, see [Unmark]).
	Transient(err error) bool
	// Exhausted reports whether d's message used its broker retries.
	Exhausted(d D) bool
	// Retry gives the messages of ds back to the broker, to be delivered
	// again after a wait, with the story of env. An error fails the
	// dead-letter write, which the engine retries.
	Retry(ctx context.Context, ds []D, env deadletter.Envelope) error
}

// A RetrySink is the dead-letter sink of a broker source (its
// DeadLetter method): it gives an item that failed transiently back to
// the broker, and writes every other envelope to Next. It is a
// [deadletter.BrokerRetrier].
type RetrySink[D any] struct {
	// Source is the broker source whose items the sink may retry.
	Source Retrier[D]
	// Next takes what the broker does not retry. It must not be nil.
	Next deadletter.Sink
	// Poison is matched by the source's own poison letters, which pass to
	// Next unchanged: their story is merged already, and the broker must
	// not retry them.
	Poison error
}

// Write decides env's fate as WriteOrRetry does.
func (r *RetrySink[D]) Write(ctx context.Context, env deadletter.Envelope) error {
	_, err := r.WriteOrRetry(ctx, env)
	return err
}

// WriteOrRetry gives env's item back to its broker and returns retried
// true when the item came from the source, the source retries at the
// broker, the failure is transient and none of its messages used its
// retries; it writes nothing, and returns retried true, when every
// delivery of the item is gone (the broker delivers it again by itself),
// and gives back only the deliveries that are not gone.
// Otherwise it writes env to Next, told from the first delivery when the
// item is one message.
func (r *RetrySink[D]) WriteOrRetry(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	if r.Poison != nil && errors.Is(env.Err, r.Poison) {
		return r.pass(ctx, env)
	}
	ds := r.Source.Deliveries(env)
	final := env
	if len(ds) == 1 {
		// What earlier deliveries told: the final failure's story starts
		// at the first delivery. (A batch's envelope tells this delivery's.)
		final = r.Source.Merge(ds[0], env)
	}
	if len(ds) == 0 || !r.Source.Enabled() {
		return r.pass(ctx, final)
	}
	// The broker delivers a gone delivery's message again by itself:
	// retrying it too would make two.
	live := make([]D, 0, len(ds))
	for _, d := range ds {
		if !r.Source.Gone(d) {
			live = append(live, d)
		}
	}
	if len(live) == 0 {
		return true, nil
	}
	if !r.Source.Transient(Unmark(env.Err)) {
		return r.pass(ctx, final)
	}
	for _, d := range live {
		if r.Source.Exhausted(d) {
			return r.pass(ctx, final)
		}
	}
	if err := r.Source.Retry(ctx, live, env); err != nil {
		return false, err
	}
	return true, nil
}

// pass hands env to Next. When Next is a broker source's sink too (two
// broker sources chain theirs: A.DeadLetter(B.DeadLetter(file))), Next's
// own "retried" is passed on, so that an item Next gave back to its broker
// counts as a broker retry, not as a dead letter.
func (r *RetrySink[D]) pass(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	if br, ok := r.Next.(deadletter.BrokerRetrier); ok {
		return br.WriteOrRetry(ctx, env)
	}
	return false, r.Next.Write(ctx, env)
}

// Deliveries returns the deliveries that env's item came from: the one
// of a message M (or *M), each of a []M from a Batch (nil when one of
// them is not the source's), or, for another item, the one whose id is
// env's CorrelationID. own gives a message's delivery when it is the
// source's; lookup finds a delivery by its id.
func Deliveries[M, D any](env deadletter.Envelope, own func(M) (D, bool), lookup func(id string) (D, bool)) []D {
	var ds []D
	add := func(m M) bool {
		d, ok := own(m)
		if ok {
			ds = append(ds, d)
		}
		return ok
	}
	switch it := env.Item.(type) {
	case M:
		add(it)
	case *M:
		if it != nil {
			add(*it)
		}
	case []M:
		for _, m := range it {
			if !add(m) {
				return nil
			}
		}
	default:
		if env.CorrelationID != "" {
			if d, ok := lookup(env.CorrelationID); ok {
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// Unmark peels off what made err permanent only for the in-process
// layers: a *resilience.RetryExhaustedError becomes the error of its last
// attempt, and an error marked by resilience.MarkRetried becomes the
// error it wraps.
func Unmark(err error) error {
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
