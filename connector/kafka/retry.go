package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// DefaultMaxRetries is RetryTopics.MaxRetries left at zero: the broker
// retries of one record before it goes to the dead-letter sink.
const DefaultMaxRetries = 3

// maxTierDelay bounds a tier's delay: a record waits in a tier partition
// paused for the delay, and a week is past any retention a tier is
// given by default.
const maxTierDelay = 7 * 24 * time.Hour

// RetryTopics is the broker's layer for a Kafka source: the retry-topic
// pattern. Kafka has no delayed redelivery, and a partition cannot skip a
// record that waits, so a record that must wait is produced to a tier
// topic, "<topic>.retry.<delay>" (the delay as [time.Duration.String]
// writes it, such as "orders.retry.30s"), with its story and the time it
// is due (HeaderDue) in its headers, and the original is committed past.
// The same [Source] consumes its tier topics, in the same group: a tier
// partition whose head record is not yet due is paused until it is, on
// the source's clock, and the record is then emitted as the original was,
// its [Message] naming the original record.
//
// A record goes to the first tier whose delay covers its wait; a hand-off
// whose wait no tier covers is refused, and the item waits in process
// (see [Message.HandOff]). It comes back at its due time, or later by
// at most its tier's delay less its own wait: a tier partition is read in
// order, so a record waits behind the earlier record at its head. Choose
// delays close to the waits the pipeline asks for. A record is never held
// longer than its tier's delay from when the source read it, whatever its
// HeaderDue says (the copying process's clock may run ahead), which is
// why no tier takes a wait longer than its delay.
//
// The zero value is disabled.
type RetryTopics struct {
	// Enabled turns the retry topics on: the source hands long waits of
	// item retries to them (HandOffAfter), and its DeadLetter sink gives
	// transient failures to them. The source consumes its tiers only
	// when Enabled.
	Enabled bool
	// Delays are the tiers' delays, each positive and at most a week, no
	// two the same; their order does not matter. Required when Enabled.
	Delays []time.Duration
	// DeadLetterTopic names the topic that a [DeadLetterPublisher] for
	// the source writes to by default: see [RetryTopics.DeadLetterTopicOf].
	// Default "<topic>.dlt".
	DeadLetterTopic string
	// HandOffAfter is the shortest wait of an item retry that the
	// pipeline hands to a tier instead of waiting in process
	// (deadletter.HandOffSource); 0 hands off none. It must not exceed
	// the longest tier's delay: a wait longer than every tier stays in
	// process, so none would be handed off.
	HandOffAfter time.Duration
	// MaxRetries is how many times the source's DeadLetter sink gives one
	// record to a tier after a transient failure before it writes the
	// record to the next sink. Default [DefaultMaxRetries]; at most 100.
	MaxRetries int
	// Classifier judges, for the DeadLetter sink, whether a failure is
	// transient. The zero value is the default classifier.
	Classifier resilience.Classifier
	// Declare creates the tier topics at Open when they do not exist,
	// with the main topic's partition count and replication factor.
	Declare bool
}

// TierTopic returns the name of the tier of topic with delay d:
// "<topic>.retry.<d>".
func TierTopic(topic string, d time.Duration) string {
	return topic + ".retry." + d.String()
}

// TierTopics returns the tier topics of topic, shortest delay first; nil
// when the retry topics are not enabled.
func (r RetryTopics) TierTopics(topic string) []string {
	if !r.Enabled {
		return nil
	}
	var ts []string
	for _, d := range r.delays() {
		ts = append(ts, TierTopic(topic, d))
	}
	return ts
}

// DeadLetterTopicOf returns DeadLetterTopic, or "<topic>.dlt" when it is
// empty.
func (r RetryTopics) DeadLetterTopicOf(topic string) string {
	if r.DeadLetterTopic != "" {
		return r.DeadLetterTopic
	}
	return topic + ".dlt"
}

// delays returns the tiers' delays, shortest first.
func (r RetryTopics) delays() []time.Duration {
	ds := slices.Clone(r.Delays)
	slices.Sort(ds)
	return ds
}

// maxRetries returns MaxRetries or its default.
func (r RetryTopics) maxRetries() int {
	if r.MaxRetries == 0 {
		return DefaultMaxRetries
	}
	return r.MaxRetries
}

// tierFor returns the delay of the tier that takes a record waiting wait:
// the shortest delay at least wait, or the longest delay when none is
// (HandOff refuses such a wait; a broker retry's wait is a tier's delay).
// ok is false when there are no tiers.
func (r RetryTopics) tierFor(wait time.Duration) (delay time.Duration, ok bool) {
	ds := r.delays()
	if len(ds) == 0 {
		return 0, false
	}
	for _, d := range ds {
		if d >= wait {
			return d, true
		}
	}
	return ds[len(ds)-1], true
}

// longestDelay returns the longest tier's delay that problems would take
// (positive, at most a week); 0 when there is none.
func (r RetryTopics) longestDelay() time.Duration {
	var longest time.Duration
	for _, d := range r.Delays {
		if d > 0 && d <= maxTierDelay {
			longest = max(longest, d)
		}
	}
	return longest
}

// tierDelay returns the delay of topic when it is one of main's tiers.
func (r RetryTopics) tierDelay(main, topic string) (time.Duration, bool) {
	if !r.Enabled {
		return 0, false
	}
	rest, ok := strings.CutPrefix(topic, main+".retry.")
	if !ok {
		return 0, false
	}
	for _, d := range r.Delays {
		if d.String() == rest {
			return d, true
		}
	}
	return 0, false
}

// problems returns every problem of r for a source of topic, each a
// [*ConfigError] whose field starts with "Retry.".
func (r RetryTopics) problems(topic string) []error {
	var errs []error
	bad := func(field string, v any, why string) {
		errs = append(errs, &ConfigError{Field: "Retry." + field, Value: v, Reason: why})
	}
	if r.MaxRetries < 0 || r.MaxRetries > 100 {
		bad("MaxRetries", r.MaxRetries, "must be between 0 (the default, 3) and 100")
	}
	if r.HandOffAfter < 0 {
		bad("HandOffAfter", r.HandOffAfter, "must not be negative")
	}
	if longest := r.longestDelay(); r.HandOffAfter > 0 && longest > 0 && r.HandOffAfter > longest {
		bad("HandOffAfter", r.HandOffAfter, "must not exceed the longest tier's delay ("+longest.String()+
			"): a wait is handed off only to a tier that holds it at least as long, so no wait would ever be")
	}
	if r.DeadLetterTopic != "" && r.DeadLetterTopic == topic {
		bad("DeadLetterTopic", r.DeadLetterTopic, "must not be the topic the source reads")
	}
	seen := map[time.Duration]bool{}
	for i, d := range r.Delays {
		field := fmt.Sprintf("Delays[%d]", i)
		switch {
		case d <= 0:
			bad(field, d, "must be positive")
		case d > maxTierDelay:
			bad(field, d, "must be at most a week (168h0m0s)")
		case seen[d]:
			bad(field, d, "is there twice: two tiers would share one topic")
		}
		seen[d] = true
	}
	if r.Enabled && len(r.Delays) == 0 {
		bad("Delays", "[]", "required when Enabled: at least one tier")
	}
	if r.Enabled && topic != "" {
		for _, t := range r.TierTopics(topic) {
			if err := topicNameProblem(t); err != "" {
				bad("Delays", t, err)
			}
		}
	}
	return errs
}

// topicNameProblem says what is wrong with name as a Kafka topic name,
// "" when nothing is: at most 249 characters of [a-zA-Z0-9._-].
func topicNameProblem(name string) string {
	if len(name) > 249 {
		return "the tier topic's name is longer than Kafka's 249 characters"
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("the tier topic's name has %q, which Kafka refuses in a topic name", c)
		}
	}
	return ""
}

// validateRetry is RetryTopics' part of a source's Validate.
func validateRetry(r RetryTopics, topic string) error { return errors.Join(r.problems(topic)...) }

// HandOffAfter returns Retry.HandOffAfter, 0 without Retry: the pipeline
// hands item retries that would wait at least this long to a tier
// (deadletter.HandOffSource).
func (s *Source) HandOffAfter() time.Duration {
	if !s.cfg.Retry.Enabled {
		return 0
	}
	return s.cfg.Retry.HandOffAfter
}

// HandOff produces the message's record to the tier that covers h.Delay,
// due h.Delay from now, with its story and where its retries stand, and
// waits for the ack; the pipeline then settles the original as handed off
// (deadletter.HandOffItem). It fails, and the pipeline waits in process
// instead, when the message did not come from a source with
// HandOffAfter, no tier's delay covers h.Delay (the source holds a copy
// at most its tier's delay, so the longest tier would bring the item back
// early; this holds for a drain's hand-back of the rest of a wait too),
// its partition is no longer the source's (its session
// closed, or the partition was lost, or revoked and the revoke no longer
// waits for it: its next reader reads it again, and the item's settling
// is not committed once the revoke took its commit), or the copy was not
// stored: its outcome unknown among them (a copy that may be stored makes
// a second delivery, at least once; the original is not committed before
// it is done). A revoke waits for a copy under way (see
// SourceConfig.RevokeTimeout), and a stored copy settles the original.
func (m Message) HandOff(ctx context.Context, h deadletter.HandOff) error {
	r := m.r
	if r == nil || r.src.HandOffAfter() <= 0 {
		return errors.New("kafka: the message's source has no hand-off")
	}
	s := r.src
	if tier, _ := s.cfg.Retry.tierFor(h.Delay); tier < h.Delay {
		// The source holds a tier copy at most its tier's delay from
		// when it reads it (tierDue): the longest tier would bring the
		// item back early, and its retries would go at the tier's rate.
		return fmt.Errorf("kafka: hand off record %s: no tier of topic %q waits %s; the longest waits %s",
			m.CorrelationID(), s.cfg.Topic, h.Delay, tier)
	}
	r.copyMu.Lock()
	defer r.copyMu.Unlock()
	if r.tiered.Load() {
		return nil // another write of the record stored its copy: it comes back
	}
	if !r.beginCopy() {
		// Its next reader reads it again: a copy would be one more
		// delivery. The item waits in process; what it settles commits
		// nothing.
		return fmt.Errorf("kafka: hand off record %s: its partition is no longer the source's", m.CorrelationID())
	}
	stored := false
	defer func() { r.endCopy(stored) }()
	c := s.copier()
	if c == nil {
		return errors.New("kafka: the message's source is closed")
	}
	st := r.g.pastStory().told(h.Envelope, s.cfg.Clock.Now(), false)
	st.resume = deadletter.Resume{Node: h.Envelope.DecisionNode, Retry: h.Retry, Since: h.Since}
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	if _, err := c.tierCopy(ctx, r.kr, s.copySpec(r, st), h.Delay); err != nil {
		return fmt.Errorf("kafka: hand off record %s: %w", m.CorrelationID(), err)
	}
	r.tiered.Store(true)
	stored = true
	return nil
}

// Resumed says where a hand-off left the message's retries, when it is a
// tier's copy of a handed-off record (deadletter.HandOffItem): the copy
// carries it, so a copy read by another process resumes there too.
func (m Message) Resumed() (deadletter.Resume, bool) {
	if m.r == nil || m.r.g.pastStory().resume.Node == "" {
		return deadletter.Resume{}, false
	}
	return m.r.g.pastStory().resume, true
}

// DeadLetter returns the dead-letter sink to give the pipeline
// (pipeline.WithDeadLetter) so that the broker's retry can work: it is
// how the source learns that an item failed transiently after the
// in-process layers gave up.
//
// For an envelope of an item that came from this source (a [Message], a
// []Message from a Batch, or an item whose deadletter.Correlated id is a
// Message's), with Retry enabled, the sink:
//
//   - produces the record to a tier, when Retry's Classifier judges the
//     failure transient and the record had fewer than Retry.MaxRetries
//     broker retries: its n-th retry goes to the n-th shortest tier (the
//     longest from there on), due that tier's delay from now, with its
//     story; the item then settles, and the original is committed past;
//   - writes nothing when the record's partition is no longer the
//     source's (its session closed, or the partition was lost, or revoked
//     and the revoke no longer waits for it); the item then settles (a
//     broker retry) but the record does not: it is not committed, not even
//     by Close's last commits, and its next reader reads it again;
//   - otherwise writes the envelope to next, told from the record's first
//     delivery (every delivery's calls).
//
// A copy that is not stored, or whose outcome is unknown, fails the
// write: the engine retries it and then fails the run, and the original
// is not committed; a batch's record whose copy was stored before another
// record's failed is not copied again by the write's retry, and settles
// (committed past) even when the run then fails: its copy stands in for
// it. Every other
// envelope goes to next unchanged; a batch goes to a tier only when each
// of its records may still be retried. next
// must not be nil. The sink is a [deadletter.BrokerRetrier]: the pipeline
// counts an item it wrote nothing for as a broker retry
// (NodeStats.BrokerRetries), not as a dead letter.
func (s *Source) DeadLetter(next deadletter.Sink) deadletter.Sink {
	if next == nil {
		panic("sluice: kafka: Source.DeadLetter: next sink is nil")
	}
	return retrySink{&broker.RetrySink[*record]{Source: retrier{s}, Next: next, Poison: ErrPoison}}
}

// retrySink is the source's DeadLetter sink: the broker's retry sink,
// which also marks each record of an item it gave back to the broker and
// wrote nothing for (gone, see [retrier.Gone]) as unwritten, so that the
// item's settling does not settle it for the offset tracker (record.done):
// no commit takes it, and its next reader reads it again.
type retrySink struct{ s *broker.RetrySink[*record] }

// Write decides env's fate as WriteOrRetry does.
func (w retrySink) Write(ctx context.Context, env deadletter.Envelope) error {
	_, err := w.WriteOrRetry(ctx, env)
	return err
}

// WriteOrRetry is the broker's retry sink's. When it says retried, a
// record of the item whose tier copy is not stored was written nowhere:
// it was gone. (A retried item's record whose copy an earlier try of the
// write stored stays settled.)
func (w retrySink) WriteOrRetry(ctx context.Context, env deadletter.Envelope) (retried bool, err error) {
	retried, err = w.s.WriteOrRetry(ctx, env)
	if err != nil || !retried {
		return retried, err
	}
	for _, rec := range w.s.Source.Deliveries(env) {
		// Only a record that is gone was skipped: a live one without a
		// copy was not this sink's to write (a chained sink's "retried"
		// for a record of another source with the same id).
		if !rec.tiered.Load() && rec.gone() {
			rec.unwritten.Store(true)
		}
	}
	return retried, nil
}

// retrier is the source's part in its retry sink: a copy to a tier.
type retrier struct{ src *Source }

func (r retrier) Deliveries(env deadletter.Envelope) []*record {
	return broker.Deliveries(env, r.own, r.lookup)
}

func (r retrier) own(m Message) (*record, bool) {
	return m.r, m.r != nil && m.r.src == r.src
}

func (r retrier) lookup(id string) (*record, bool) {
	v, ok := r.src.g.inflight.Load(id)
	if !ok {
		return nil, false
	}
	return v.(*record), true
}

func (r retrier) Merge(rec *record, env deadletter.Envelope) deadletter.Envelope {
	return rec.g.pastStory().merge(env, rec.g.deliveries)
}

func (r retrier) Enabled() bool { return r.src.cfg.Retry.Enabled }

// Gone reports whether rec's session closed, or its partition is no
// longer the source's (see offsetTracker.gone): its next reader reads it
// again, and a copy would be one more delivery. The sink then writes
// nothing for rec, and retrySink keeps its settling from the commits.
func (r retrier) Gone(rec *record) bool { return rec.gone() }

func (r retrier) Transient(err error) bool { return r.src.cfg.Retry.Classifier.IsTransient(err) }

func (r retrier) Exhausted(rec *record) bool {
	return rec.g.pastStory().retries >= r.src.cfg.Retry.maxRetries()
}

// Retry produces each record to the tier of its next broker retry and
// waits for the acks; a single record's copy carries the story of env. A
// record whose copy an earlier try of the write stored is skipped: the
// engine retries a failed write whole, and a batch's copies that were
// acked before one failed must not be stored again.
func (r retrier) Retry(ctx context.Context, recs []*record, env deadletter.Envelope) error {
	s := r.src
	c := s.copier()
	if c == nil {
		return errors.New("kafka: the source is closed")
	}
	ds := s.cfg.Retry.delays()
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	for _, rec := range recs {
		if err := r.copyOnce(ctx, c, rec, ds, len(recs) == 1, env); err != nil {
			return err
		}
	}
	return nil
}

// copyOnce copies rec to its tier unless a copy of it is stored already
// or it is gone, one writer at a time: two writes of one record at once
// (two branches that failed the same message) store one copy.
func (r retrier) copyOnce(ctx context.Context, c *copier, rec *record, ds []time.Duration, single bool, env deadletter.Envelope) error {
	rec.copyMu.Lock()
	defer rec.copyMu.Unlock()
	if rec.tiered.Load() {
		return nil
	}
	if !rec.beginCopy() {
		// Gone since the sink asked (Gone): its revoke no longer waits
		// for it, and its next reader reads it again. Left without a
		// copy, it is unwritten (retrySink).
		return nil
	}
	return r.copyOne(ctx, c, rec, ds, single, env)
}

// copyOne produces rec, whose copy beginCopy registered, to the tier of
// its next broker retry, waits for the ack, and ends the copy; single says
// the copy carries the story of env.
func (r retrier) copyOne(ctx context.Context, c *copier, rec *record, ds []time.Duration, single bool, env deadletter.Envelope) error {
	s := r.src
	stored := false
	defer func() { rec.endCopy(stored) }()
	st := *rec.g.pastStory()
	if single {
		st = st.told(env, s.cfg.Clock.Now(), false)
	}
	st.resume = deadletter.Resume{}
	st.retries = rec.g.pastStory().retries + 1
	wait := ds[min(st.retries, len(ds))-1]
	if _, err := c.tierCopy(ctx, rec.kr, s.copySpec(rec, st), wait); err != nil {
		return fmt.Errorf("kafka: broker retry of record %s: %w", rec.emitted().CorrelationID(), err)
	}
	rec.tiered.Store(true)
	stored = true
	return nil
}
