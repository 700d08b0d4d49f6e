package rabbitmq

import (
	"maps"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// Headers with which a message sent to the retry topology carries its
// story to its next delivery, so that the envelope of its final failure
// tells every call it had, across deliveries.
const (
	// HeaderAttempts is the calls the message had in earlier deliveries.
	HeaderAttempts = "x-sluice-attempts"
	// HeaderRetries is the times it went through the retry topology.
	HeaderRetries = "x-sluice-retries"
	// HeaderFirstFailure is when it first failed (RFC 3339, UTC).
	HeaderFirstFailure = "x-sluice-first-failure"
	// HeaderOriginNode is the node where it first failed.
	HeaderOriginNode = "x-sluice-first-origin-node"
	// HeaderHistory is the JSON of its earlier calls' history, the last
	// broker.MaxHistory of them.
	HeaderHistory = "x-sluice-history"
	// HeaderQueue is the queue whose retry topology the story belongs to:
	// a story from another queue is ignored.
	HeaderQueue = "x-sluice-queue"
	// HeaderHandOffNode and HeaderHandOffRetry say where a hand-off left
	// the message's in-process retries: the node, and the retry its next
	// call there makes (see RetryTopology.HandOffAfter).
	HeaderHandOffNode  = "x-sluice-handoff-node"
	HeaderHandOffRetry = "x-sluice-handoff-retry"
	// HeaderHandOffSince is when those retries started (RFC 3339, UTC),
	// from which the item retry's MaxElapsed counts.
	HeaderHandOffSince = "x-sluice-handoff-since"
	// HeaderDeliveries counts the deliveries of a message that ended
	// without an outcome, on a queue where the broker does not count them
	// (see SourceConfig.MaxDeliveries).
	HeaderDeliveries = "x-sluice-failed-deliveries"
)

// A past is what a delivery's headers say of the message's earlier
// deliveries.
type past struct {
	attempts int
	retries  int
	first    time.Time
	origin   string
	history  []deadletter.Attempt
	// Where a hand-off left the retries ("" for none).
	handOffNode  string
	handOffRetry int
	handOffSince time.Time
}

// pastOf reads the story headers that the retry topology of queue wrote;
// nil when there are none, or they come from another queue (a message
// forwarded with its headers from another pipeline). Headers of another
// shape are ignored: they cannot make a delivery fail.
func pastOf(h amqp.Table, queue string) *past {
	if q, _ := h[HeaderQueue].(string); q != queue {
		return nil
	}
	n, ok := intHeader(h[HeaderAttempts])
	if !ok {
		return nil
	}
	p := &past{attempts: n}
	p.retries, _ = intHeader(h[HeaderRetries])
	if s, ok := h[HeaderFirstFailure].(string); ok {
		p.first, _ = time.Parse(time.RFC3339Nano, s)
	}
	p.origin, _ = h[HeaderOriginNode].(string)
	if n, ok := h[HeaderHandOffNode].(string); ok {
		if r, ok := intHeader(h[HeaderHandOffRetry]); ok && r > 0 {
			p.handOffNode, p.handOffRetry = n, r
			if s, ok := h[HeaderHandOffSince].(string); ok {
				p.handOffSince, _ = time.Parse(time.RFC3339Nano, s)
			}
		}
	}
	if s, ok := h[HeaderHistory].(string); ok {
		p.history = broker.DecodeHistory(s)
	}
	return p
}

func intHeader(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int32:
		return int(n), true
	case int:
		return n, true
	case string:
		i, err := strconv.Atoi(n)
		return i, err == nil
	}
	return 0, false
}

// merge returns env with the delivery's past before it: the calls of
// earlier deliveries counted, their history first, the first failure and
// the node where it happened (OriginNode) taken from them. DecisionNode
// stays the node that dead-lettered the item, whose input it is, which a
// re-drive by node (deadletter.WithDecisionNodes) selects on.
func (p *past) merge(env deadletter.Envelope) deadletter.Envelope {
	if p == nil {
		return env
	}
	env.Attempts += p.attempts
	env.History = append(append([]deadletter.Attempt(nil), p.history...), env.History...)
	if !p.first.IsZero() && (env.FirstFailure.IsZero() || p.first.Before(env.FirstFailure)) {
		env.FirstFailure = p.first
	}
	if p.origin != "" {
		env.OriginNode = p.origin
	}
	return env
}

// retryCopy returns the message to send to the retry topology for d after
// the failure env: the original, with the headers that carry env's story.
// A hand-off (h not nil) says where the retries go on and is not a trip
// through the topology; a broker retry is, and starts the in-process
// retries afresh. The original's Expiration is left off, so that the retry
// queue's TTL is the delay.
func (d *delivery) retryCopy(env deadletter.Envelope, ho *handOffAt) *amqp.Publishing {
	env = d.past.merge(env)
	pub := d.copyWith(nil)
	h := pub.Headers
	h[HeaderAttempts] = int64(env.Attempts)
	if ho != nil {
		h[HeaderRetries] = int64(d.retries)
		h[HeaderHandOffNode] = ho.node
		h[HeaderHandOffRetry] = int64(ho.retry)
		if ho.since.IsZero() {
			delete(h, HeaderHandOffSince)
		} else {
			h[HeaderHandOffSince] = ho.since.UTC().Format(time.RFC3339Nano)
		}
	} else {
		h[HeaderRetries] = int64(d.retries + 1)
		delete(h, HeaderHandOffNode)
		delete(h, HeaderHandOffRetry)
		delete(h, HeaderHandOffSince)
	}
	if !env.FirstFailure.IsZero() {
		h[HeaderFirstFailure] = env.FirstFailure.UTC().Format(time.RFC3339Nano)
	}
	if env.OriginNode != "" {
		h[HeaderOriginNode] = env.OriginNode
	}
	h[HeaderHistory] = broker.EncodeHistory(env.History)
	return pub
}

// failedRun returns the story headers of d's copy after it failed the run:
// the earlier deliveries' story with this run told after it, one entry
// per failed call, each naming its node (see Message.Rejected).
func (d *delivery) failedRun() amqp.Table {
	env := d.why.Load()
	if env == nil {
		// Told nothing (a node restart took the item up, or the engine
		// could not say): the run still failed because of it.
		env = &deadletter.Envelope{Attempts: 1, LastFailure: d.src.cfg.Clock.Now(), ErrText: "failed the run"}
	}
	run := *env
	run.Attempts = max(run.Attempts, 1)
	if run.FirstFailure.IsZero() {
		run.FirstFailure = run.LastFailure
	}
	if len(run.History) == 0 {
		run.History = []deadletter.Attempt{{Time: run.LastFailure, Layer: resilience.ItemRetry,
			Retry: run.Attempts - 1, Err: run.ErrText, Node: run.OriginNode}}
	} else {
		hist := make([]deadletter.Attempt, len(run.History))
		for i, a := range run.History {
			if a.Node == "" {
				a.Node = run.OriginNode
			}
			hist[i] = a
		}
		run.History = hist
	}
	run = d.past.merge(run)
	h := amqp.Table{HeaderAttempts: int64(run.Attempts), HeaderHistory: broker.EncodeHistory(run.History)}
	if !run.FirstFailure.IsZero() {
		h[HeaderFirstFailure] = run.FirstFailure.UTC().Format(time.RFC3339Nano)
	}
	if run.OriginNode != "" {
		h[HeaderOriginNode] = run.OriginNode
	}
	return h
}

// A handOffAt is where a hand-off leaves a message's retries.
type handOffAt struct {
	node  string
	retry int
	since time.Time
}

// copyWith returns a copy of d's message, with its headers, the source's
// queue named in HeaderQueue, and the entries of set; without the
// sequence header and the Expiration.
//
// The copy leaves the broker's x-death behind: a copy that carried an
// x-death entry for the source's queue (the message was once dead-lettered
// out of it) would, on its way back from a retry queue, look to RabbitMQ
// like a dead-letter cycle without a rejection, which it drops silently.
// What the entries counted for the queue goes on in HeaderDeliveries.
func (d *delivery) copyWith(set amqp.Table) *amqp.Publishing {
	o := d.orig
	h := maps.Clone(o.Headers)
	if h == nil {
		h = amqp.Table{}
	}
	delete(h, SeqHeader)
	if n := xDeathCount(h, d.src.cfg.Queue); n > 0 {
		c, _ := intHeader(h[HeaderDeliveries])
		h[HeaderDeliveries] = int64(max(c, 0) + n)
	}
	for k := range h {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			delete(h, k)
		}
	}
	h[HeaderQueue] = d.src.cfg.Queue
	maps.Copy(h, set)
	return &amqp.Publishing{
		Headers: h, ContentType: o.ContentType, ContentEncoding: o.ContentEncoding,
		DeliveryMode: o.DeliveryMode, Priority: o.Priority, CorrelationId: o.CorrelationId,
		ReplyTo: o.ReplyTo, MessageId: o.MessageId, Timestamp: o.Timestamp,
		Type: o.Type, UserId: o.UserId, AppId: o.AppId, Body: o.Body,
	}
}
