package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/deadletter"
)

// HandOffAfter returns the retry topology's HandOffAfter, 0 without the
// topology: the pipeline hands item retries that would wait at least this
// long to the broker (deadletter.HandOffSource).
func (s *Source) HandOffAfter() time.Duration {
	if !s.cfg.Retry.Enabled {
		return 0
	}
	return s.cfg.Retry.HandOffAfter
}

// HandOff sends a copy of the message, with its story and where its
// retries stand, to the retry queue whose delay is the shortest not shorter
// than h.Delay; the pipeline then acks the message (deadletter.HandOffItem).
// It fails, and the pipeline waits in process instead, when the message
// did not come from a source with the retry topology and HandOffAfter,
// when no retry queue waits that long (the longest would cut the wait
// short), when its channel is gone (the broker has put it back in the
// queue), or when the copy cannot be published. The copy is published
// before the message is acked: if the ack is lost with the connection, the
// broker delivers the message again as well (at least once).
func (m Message) HandOff(ctx context.Context, h deadletter.HandOff) error {
	d := m.d
	if d == nil || d.src.HandOffAfter() <= 0 {
		return errors.New("rabbitmq: the message's source has no hand-off")
	}
	if d.sess.isGone() {
		return errors.New("rabbitmq: the message's channel is gone: it is back in the queue")
	}
	q, rt := d.src.cfg.Queue, &d.src.cfg.Retry
	wait := rt.tierForWait(h.Delay)
	if wait < h.Delay {
		// The longest retry queue would cut the wait short.
		return fmt.Errorf("rabbitmq: no retry queue of queue %q waits %s; the longest waits %s", q, h.Delay, wait)
	}
	tier := rt.tierName(q, wait)
	pub := d.retryCopy(h.Envelope, &handOffAt{node: h.Envelope.DecisionNode, retry: h.Retry, since: h.Since})
	if err := d.src.copies.publish(ctx, "", tier, *pub); err != nil {
		return fmt.Errorf("rabbitmq: hand message %s to the retry queue %q: %w", d.id, tier, err)
	}
	d.copied.Store(true)
	return nil
}

// Resumed says where a hand-off left the message's retries: the node, the
// retry its next call there makes, and when they started
// (deadletter.HandOffItem).
func (m Message) Resumed() (deadletter.Resume, bool) {
	if m.d == nil || m.d.past == nil || m.d.past.handOffNode == "" {
		return deadletter.Resume{}, false
	}
	p := m.d.past
	return deadletter.Resume{Node: p.handOffNode, Retry: p.handOffRetry, Since: p.handOffSince}, true
}

// Rejected keeps why the message failed the run (deadletter.RejectedItem):
// with MaxDeliveries, the copy that the source puts back carries it, and
// the poison envelope tells every failed run.
func (m Message) Rejected(env deadletter.Envelope) {
	if m.d != nil {
		m.d.why.Store(&env)
	}
}

// ErrPoison is matched by the error in the dead-letter envelope of a
// message that the source stopped delivering because it failed
// SourceConfig.MaxDeliveries times.
var ErrPoison = errors.New("rabbitmq: poison message")

// UseDeadLetter is how the pipeline gives the source its dead-letter sink,
// for poison messages (deadletter.DeadLetterWriter).
func (s *Source) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	s.letters.Use(sink, base)
}

// Poisoned returns how many poison messages the source dead-lettered.
func (s *Source) Poisoned() int64 { return s.poisoned.Load() }

// failures returns how many earlier deliveries of d failed: those whose
// item failed the run (node.Rejected), which the copies the source puts
// back count (HeaderDeliveries), and the times the broker dead-lettered it
// out of the queue (x-death). An item that only was in flight when a run
// ended (node.Failed) is put back as a copy that carries its count
// unchanged.
//
// The broker's redelivery marks are not counted: a quorum queue's
// x-delivery-count and the Redelivered flag also count the messages a
// consumer had prefetched and never started when its connection closed,
// so they cannot tell a poison message from its neighbours.
func (s *Source) failures(d amqp.Delivery) int {
	q := s.cfg.Queue
	n := xDeathCount(d.Headers, q)
	if hq, _ := d.Headers[HeaderQueue].(string); hq == q {
		if c, ok := intHeader(d.Headers[HeaderDeliveries]); ok && c > 0 {
			n += c
		}
	}
	return n
}

// recount settles d, put back after a run, on the acker: an error requeues
// d, nil acks it. When d failed the run (Rejected) and the runs it failed,
// this one included, reach MaxDeliveries, it writes d's message to the
// dead-letter sink: no copy is needed. Otherwise it puts a copy of d's
// message back at the end of the queue with its count of failed runs.
// When the copy or the dead letter fails (a full queue with reject-publish,
// headers over the frame size, or ctx ends: the session's Close gave up
// waiting after CloseTimeout), the count is kept in process (see
// keepRuns), for the message's next delivery to a source of the queue: the
// guard still fires within one process. A copy the broker took but did
// not confirm by then may be in the queue beside the requeued message (at
// least once).
func (s *Source) recount(ctx context.Context, d *delivery) error {
	n := d.failures
	if d.rejected {
		n++
	}
	var story amqp.Table
	if d.rejected {
		// Why the run failed, for the poison envelope.
		story = d.failedRun()
		story[HeaderQueue] = s.cfg.Queue
	}
	if d.rejected && n >= s.cfg.MaxDeliveries {
		err := s.poisonRun(ctx, d, n, story)
		if err != nil {
			keepRuns(s.cfg.Queue, d, n, story)
		}
		return err
	}
	// The copy leaves x-death behind (copyWith): its count is in n.
	set := amqp.Table{HeaderDeliveries: int64(n)}
	maps.Copy(set, story)
	pub := d.copyWith(set)
	delete(pub.Headers, "x-delivery-count")
	ctx, cancel := context.WithTimeout(ctx, DefaultConfirmTimeout)
	defer cancel()
	err := s.copies.publish(ctx, "", s.cfg.Queue, *pub)
	if err != nil && n > 0 {
		keepRuns(s.cfg.Queue, d, n, story)
	}
	return err
}

// kept holds, by queue and message (crashID), the failed runs of messages
// whose copy could not carry them, and their story, for their next
// delivery to a source of the queue in this process; at most maxKeptRuns.
var (
	kept  sync.Map // string -> keptRun
	nKept atomic.Int64
)

// maxKeptRuns bounds kept; past it, it starts afresh.
const maxKeptRuns = 100_000

type keptRun struct {
	failures int
	story    amqp.Table // nil for none
}

func keptKey(queue string, d amqp.Delivery) string { return queue + "\x00" + crashID(d) }

// keepRuns keeps n failed runs of d's message, and their story.
func keepRuns(queue string, d *delivery, n int, story amqp.Table) {
	if story == nil {
		// A Failed delivery: the story kept before stays.
		story = d.kept
	}
	if nKept.Add(1) > maxKeptRuns {
		kept.Clear()
		nKept.Store(1)
	}
	kept.Store(keptKey(queue, d.orig), keptRun{failures: n, story: story})
}

// takeKept returns the failed runs kept for d's message, and forgets them.
func takeKept(queue string, d amqp.Delivery) (keptRun, bool) {
	if nKept.Load() == 0 {
		return keptRun{}, false
	}
	v, ok := kept.LoadAndDelete(keptKey(queue, d))
	if !ok {
		return keptRun{}, false
	}
	return v.(keptRun), true
}

// poison writes the message of d, which failed MaxDeliveries times, to the
// pipeline's dead-letter sink and acks it. An error of the sink ends Run:
// the message is not acked and goes back to the queue.
func (s *Source) poison(ctx context.Context, d *delivery, msg Message) error {
	sink, env := s.poisonLetter(d, msg, d.failures, d.past)
	if sink == nil {
		return fmt.Errorf("rabbitmq: message %s is poison and the pipeline has no dead-letter sink", d.id)
	}
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("rabbitmq: dead-letter poison message %s: %w", d.id, err)
	}
	s.poisoned.Add(1)
	d.sess.track()
	d.sess.settle(settle{tag: d.tag, how: ack})
	return nil
}

// poisonRun writes the message of d, whose run just failed and made n
// failed runs, MaxDeliveries, to the pipeline's dead-letter sink, on the
// acker (see recount), which then acks it; story is the run's (failedRun).
func (s *Source) poisonRun(ctx context.Context, d *delivery, n int, story amqp.Table) error {
	sink, env := s.poisonLetter(d, d.message(), n, pastOf(story, s.cfg.Queue))
	if sink == nil {
		return fmt.Errorf("rabbitmq: message %s is poison and the pipeline has no dead-letter sink", d.id)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultConfirmTimeout)
	defer cancel()
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("rabbitmq: dead-letter poison message %s: %w", d.id, err)
	}
	s.poisoned.Add(1)
	return nil
}

// poisonLetter returns the dead-letter sink and the poison envelope of
// msg, which failed n times, p their story (nil: none told).
func (s *Source) poisonLetter(d *delivery, msg Message, n int, p *past) (deadletter.Sink, deadletter.Envelope) {
	why := fmt.Errorf("%w: message %s of queue %q failed %d deliveries; MaxDeliveries is %d",
		ErrPoison, describeMsg(msg), s.cfg.Queue, n, s.cfg.MaxDeliveries)
	sink, env := s.letters.Letter(msg, messageType, why, d.id, s.cfg.Clock.Now())
	env = p.merge(env)
	if p != nil && len(p.history) > 0 {
		// The story its copies carried: each failed run, its node, error
		// and time; the poison letter names the node that failed first.
		env.LastFailure = p.history[len(p.history)-1].Time
	}
	return sink, env
}

// describeMsg names a message by its MessageID, else by the size of its
// body.
func describeMsg(m Message) string {
	if m.MessageID != "" {
		return fmt.Sprintf("%q", m.MessageID)
	}
	return fmt.Sprintf("(no message id, %d-byte body)", len(m.Body))
}
