package nats

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// Headers of the copy that a [Source] with MaxDeliveries publishes in
// place of a message that failed a run (its item's outcome was
// node.Rejected): the copy carries the message's count of failed runs and
// their story, so that the poison guard counts what the pipeline saw, in
// any process, and the poison envelope tells why each run failed.
const (
	// HeaderFailures is the runs the message failed, this copy's
	// publishing included.
	HeaderFailures = "Sluice-Failures"
	// HeaderConsumer is the stream and durable consumer the copy is for,
	// "<stream>/<consumer>": a source of another consumer of the same
	// stream acks the copy without emitting it. A message counts as a
	// copy only when its Nats-Msg-Id is exactly the copy's (see
	// [Republishing]); any other is emitted, its Sluice-* headers not
	// counted.
	HeaderConsumer = "Sluice-Consumer"
	// HeaderSequence is the stream sequence of the message first
	// published, which [Message.Sequence] and CorrelationID keep.
	HeaderSequence = "Sluice-Sequence"
	// HeaderDeliveries is the deliveries of the message's earlier copies,
	// which [Message.Deliveries] adds to the server's count.
	HeaderDeliveries = "Sluice-Deliveries"
	// HeaderMsgID is the Nats-Msg-Id the message was first published
	// with, which [Message.MsgID] returns: the copy's own Nats-Msg-Id
	// names the copy, so that the stream's duplicate window drops a second
	// copy of the same failure.
	HeaderMsgID = "Sluice-Msg-Id"
	// HeaderAttempts is the calls the message had in its failed runs.
	HeaderAttempts = "Sluice-Attempts"
	// HeaderFirstFailure is when it first failed (RFC 3339, UTC).
	HeaderFirstFailure = "Sluice-First-Failure"
	// HeaderFirstNode is the node where it first failed.
	HeaderFirstNode = "Sluice-First-Origin-Node"
	// HeaderHistory is the JSON of its failed calls, the newest
	// broker.MaxHistory of them, each naming its node.
	HeaderHistory = "Sluice-History"
)

// copyTimeout bounds the wait for the PubAck of one copy.
const copyTimeout = 5 * time.Second

// carried is what a delivery's headers say of a message copied by this
// source's consumer; ok false for a message that is no such copy.
type carried struct {
	ok         bool
	failures   int
	seq        uint64 // the first message's stream sequence
	deliveries int    // of the earlier copies
	past       *story // nil for none
}

// copyID is the Nats-Msg-Id of the copy that copyMsg publishes for
// consumer ("<stream>/<consumer>") of the message first published at seq,
// after it failed failures runs.
func copyID(consumer string, seq uint64, failures int) string {
	return fmt.Sprintf("sluice:%s:%d:%d", consumer, seq, failures)
}

// copyFor returns the consumer that h, the headers of a message in stream,
// names as a counted copy's, when they are exactly a copy's that copyMsg
// publishes into stream: its Nats-Msg-Id the one copyMsg sets from
// HeaderConsumer, HeaderSequence and HeaderFailures, and its
// Nats-Expected-Stream stream. A message that only carries Sluice-*
// headers (forwarded with them from another stream, or a dead letter given
// back as it was) is no copy: "" and false.
func copyFor(h natsgo.Header, stream string) (string, bool) {
	c := h.Get(HeaderConsumer)
	if c == "" || !strings.HasPrefix(c, stream+"/") || h.Get(jetstream.ExpectedStreamHeader) != stream {
		return "", false
	}
	failures, err := strconv.Atoi(h.Get(HeaderFailures))
	if err != nil {
		return "", false
	}
	seq, err := strconv.ParseUint(h.Get(HeaderSequence), 10, 64)
	if err != nil || h.Get(jetstream.MsgIDHeader) != copyID(c, seq, failures) {
		return "", false
	}
	return c, true
}

// carriedOf reads the copy headers of h, a message of stream, when they
// are a copy's for consumer (see copyFor). Headers of another shape are
// ignored: they cannot make a delivery fail.
func carriedOf(h natsgo.Header, stream, consumer string) carried {
	if c, ok := copyFor(h, stream); !ok || c != consumer {
		return carried{}
	}
	c := carried{ok: true}
	c.failures, _ = strconv.Atoi(h.Get(HeaderFailures))
	c.seq, _ = strconv.ParseUint(h.Get(HeaderSequence), 10, 64)
	c.deliveries, _ = strconv.Atoi(h.Get(HeaderDeliveries))
	c.failures, c.deliveries = max(c.failures, 0), max(c.deliveries, 0)
	p := &story{}
	p.attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	p.first, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderFirstFailure))
	p.origin = h.Get(HeaderFirstNode)
	p.history = broker.DecodeHistory(h.Get(HeaderHistory))
	if p.attempts > 0 || len(p.history) > 0 || p.origin != "" {
		c.past = p
	}
	return c
}

// consumerName is what HeaderConsumer holds for the source's consumer.
func (s *Source) consumerName() string { return s.cfg.Stream + "/" + s.cfg.Consumer }

// Rejected keeps why the message failed the run (deadletter.RejectedItem):
// the copy that the source publishes, once the item's outcome says
// Rejected, carries it.
func (m Message) Rejected(env deadletter.Envelope) {
	if m.d != nil {
		m.d.rejected.Store(&env)
	}
}

// failedRun returns the message's story with the run that d failed told
// after it: one entry per failed call, each naming its node.
func (d *delivery) failedRun() *story {
	p := d.past
	if p == nil {
		p = &story{}
	}
	st := &story{attempts: p.attempts, first: p.first, origin: p.origin, history: p.history}
	env := d.rejected.Load()
	if env == nil {
		// Told nothing (a node restart took the item up, or the engine
		// could not say): the run still failed because of it.
		env = &deadletter.Envelope{Attempts: 1, LastFailure: d.src.cfg.Clock.Now(), ErrText: "failed the run"}
	}
	st.attempts += max(env.Attempts, 1)
	first := env.FirstFailure
	if first.IsZero() {
		first = env.LastFailure
	}
	if st.first.IsZero() {
		st.first = first
	}
	if st.origin == "" {
		st.origin = env.OriginNode
	}
	hist := append([]deadletter.Attempt(nil), st.history...)
	if len(env.History) > 0 {
		for _, a := range env.History {
			if a.Node == "" {
				a.Node = env.OriginNode
			}
			hist = append(hist, a)
		}
	} else {
		hist = append(hist, deadletter.Attempt{Time: env.LastFailure, Layer: resilience.ItemRetry,
			Retry: max(env.Attempts-1, 0), Err: env.ErrText, Node: env.OriginNode})
	}
	if len(hist) > broker.MaxHistory {
		hist = hist[len(hist)-broker.MaxHistory:]
	}
	st.history = hist
	return st
}

// copyMsg returns the copy of d's message to publish in its place after
// it failed a run: its subject, data and headers, less the headers the
// server acts on (Nats-*), with the count, the story and a Nats-Msg-Id
// of its own.
func (d *delivery) copyMsg() *natsgo.Msg {
	s := d.src
	h := natsgo.Header{}
	for k, vs := range d.msg.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "nats-") || (!d.copy && strings.HasPrefix(lk, "sluice-")) {
			// The server's, or Sluice-* headers of a message that is no
			// copy of this consumer's (forwarded with them): not its story.
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	if id := d.msg.Header.Get(jetstream.MsgIDHeader); id != "" && h.Get(HeaderMsgID) == "" {
		h.Set(HeaderMsgID, id)
	}
	failures := d.failures + 1
	h.Set(HeaderConsumer, s.consumerName())
	h.Set(HeaderFailures, strconv.Itoa(failures))
	h.Set(HeaderSequence, strconv.FormatUint(d.seq, 10))
	h.Set(HeaderDeliveries, strconv.Itoa(d.prior+d.deliveries))
	st := d.failedRun()
	h.Set(HeaderAttempts, strconv.Itoa(st.attempts))
	if !st.first.IsZero() {
		h.Set(HeaderFirstFailure, st.first.UTC().Format(time.RFC3339Nano))
	}
	if st.origin != "" {
		h.Set(HeaderFirstNode, st.origin)
	}
	h.Set(HeaderHistory, broker.EncodeHistory(st.history))
	// The same failure of the same message makes the same id: a copy
	// published again (its ack was lost, and the message failed again) is
	// dropped by the stream's duplicate window.
	h.Set(jetstream.MsgIDHeader, copyID(s.consumerName(), d.seq, failures))
	h.Set(jetstream.ExpectedStreamHeader, s.cfg.Stream)
	return &natsgo.Msg{Subject: d.msg.Subject, Header: h, Data: d.msg.Data}
}

// recount settles d, which failed a run, on the acker. When the runs it
// failed, this one included, reach MaxDeliveries, it writes d's message to
// the dead-letter sink, and the acker terminates it: no copy is needed.
// Otherwise it publishes the copy of d and waits for the stream's PubAck,
// and the acker acks d. When the copy or the dead letter fails (the
// stream refuses the copy: a mirror, a MaxMsgSize its headers exceed; or
// ctx ends with Close), the acker naks d, and the failed run is counted in
// process, by d's first sequence, for its next delivery to this source
// (see keepFailures): the guard still fires within one process.
//
// A process that dies between the copy and the ack leaves both: the
// message comes back after AckWait with its old count beside the copy
// with the new one (at least once); if it fails again, its copy has the
// copy's id, and the stream drops it within its duplicate window.
func (s *Source) recount(ctx context.Context, d *delivery) settlement {
	failures := d.failures + 1
	if failures >= s.cfg.MaxDeliveries {
		if err := s.poisonRun(ctx, d, failures); err != nil {
			s.keepFailures(d, failures)
			return nak
		}
		s.forget(d)
		return term
	}
	if err := s.publishCopy(ctx, d); err != nil {
		s.keepFailures(d, failures)
		return nak
	}
	// Its story is in the copy now.
	if _, ok := s.stories.LoadAndDelete(d.seq); ok {
		s.nStories.Add(-1)
	}
	s.forget(d)
	return ack
}

// forget records that d's message is done with for good, replaced by its
// copy or dead-lettered as poison: a late delivery of it is settled
// without being emitted or dead-lettered again (see Source.replaced).
func (s *Source) forget(d *delivery) {
	if s.nReplaced.Add(1) > maxReplaced {
		s.replaced.Clear()
		s.nReplaced.Store(1)
	}
	s.replaced.Store(d.streamSeq, struct{}{})
}

// publishCopy publishes the copy of d and waits for the stream's PubAck,
// at most copyTimeout.
func (s *Source) publishCopy(ctx context.Context, d *delivery) error {
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	js, err := jetstream.New(d.sess.nc)
	if err != nil {
		return err
	}
	if _, err := js.PublishMsg(ctx, d.copyMsg()); err != nil {
		return fmt.Errorf("nats: publish the counted copy of message %s: %w", d.id, err)
	}
	return nil
}

// keepFailures keeps, for the next delivery of d's message to this
// source, that it failed failures runs and the story of them, this one
// included: a copy that could not carry them. It is kept even past
// maxStories: a message whose count is lost would fail runs without end.
func (s *Source) keepFailures(d *delivery, failures int) {
	st := d.failedRun()
	st.failures = failures
	if _, loaded := s.stories.Swap(d.seq, st); !loaded {
		s.nStories.Add(1)
	}
}
