package kafka

import (
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// Headers of the copies a [Source] produces in place of a record: to a
// tier topic, for a record that waits (a hand-off or a broker retry), and
// to the topic itself, for a record that failed a run under the poison
// guard (MaxDeliveries). A copy carries the record's story, so that the
// next delivery, in any process, goes on counting where this one stopped,
// and the dead-letter envelope at the end tells every failed run.
//
// A source reads these headers only from a record whose HeaderConsumer
// names its own topic and group: a record that only carries Sluice-*
// headers (forwarded with them from elsewhere) is emitted as any other,
// its headers not counted. A record whose HeaderConsumer names its topic
// and another group is that group's copy: the source commits past it
// without emitting it.
const (
	// HeaderConsumer is "<topic>/<group>": the topic and consumer group
	// the copy is for.
	HeaderConsumer = "Sluice-Consumer"
	// HeaderTopic, HeaderPartition and HeaderOffset name the record first
	// produced, which the copy's [Message] keeps.
	HeaderTopic     = "Sluice-Topic"
	HeaderPartition = "Sluice-Partition"
	HeaderOffset    = "Sluice-Offset"
	// HeaderDeliveries is the deliveries of the record and its earlier
	// copies, which the next delivery's Message.Deliveries goes on from.
	HeaderDeliveries = "Sluice-Deliveries"
	// HeaderRetries is the broker retries the record had: the times the
	// source's DeadLetter sink gave it to a tier (RetryTopics.MaxRetries).
	HeaderRetries = "Sluice-Retries"
	// HeaderFailures is the runs the record failed (MaxDeliveries), this
	// copy's included.
	HeaderFailures = "Sluice-Failures"
	// HeaderAttempts is the calls the record had in its failed deliveries.
	HeaderAttempts = "Sluice-Attempts"
	// HeaderFirstFailure is when it first failed (RFC 3339, UTC).
	HeaderFirstFailure = "Sluice-First-Failure"
	// HeaderFirstNode is the node where it first failed.
	HeaderFirstNode = "Sluice-First-Origin-Node"
	// HeaderHistory is the JSON of its failed calls, the newest
	// broker.MaxHistory of them, each naming its node.
	HeaderHistory = "Sluice-History"
	// HeaderDue is when a copy in a tier is due (RFC 3339, UTC): the
	// source does not emit it before, nor holds it longer than its tier's
	// delay from when it read the copy.
	HeaderDue = "Sluice-Due"
	// HeaderResumeNode, HeaderResumeRetry and HeaderResumeSince say where
	// a hand-off left the record's item retry: the node, the retry its
	// next call makes, and when the retries started ([Message.Resumed]).
	HeaderResumeNode  = "Sluice-Resume-Node"
	HeaderResumeRetry = "Sluice-Resume-Retry"
	HeaderResumeSince = "Sluice-Resume-Since"
)

// A story is what a record's earlier deliveries told: the calls it had,
// the runs it failed, and where a hand-off left its retries.
type story struct {
	attempts int
	first    time.Time
	origin   string
	history  []deadletter.Attempt
	resume   deadletter.Resume // Node "" for none
	failures int               // runs failed (the poison guard's count)
	retries  int               // broker retries used
}

// carried is what a record's headers say of it when it is a copy the
// source's consumer made; ok false for a record that is no such copy.
type carried struct {
	ok         bool
	topic      string // the first record's
	partition  int32
	offset     int64
	deliveries int       // of the record and its earlier copies
	due        time.Time // zero for none
	past       story
}

// othersCopy reports whether rec is a copy that a source of another
// group made of a record of the same topic (in the topic itself, or in
// its tiers, which every group of the topic shares): that group reads it,
// this one has read the record it copies.
func (s *Source) othersCopy(rec *record) bool {
	c, _ := header(rec.kr.Headers, HeaderConsumer)
	return c != "" && c != s.consumer && strings.HasPrefix(c, s.cfg.Topic+"/")
}

// consumerName is what HeaderConsumer holds for a source of topic in
// group.
func consumerName(topic, group string) string { return topic + "/" + group }

// header returns the value of the last header named key, and whether
// there is one.
func header(hs []kgo.RecordHeader, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

// carriedOf reads the copy headers of hs when HeaderConsumer names
// consumer. Values of another shape are read as none: they cannot make a
// delivery fail.
func carriedOf(hs []kgo.RecordHeader, consumer string) carried {
	if c, _ := header(hs, HeaderConsumer); c == "" || c != consumer {
		return carried{}
	}
	get := func(k string) string { v, _ := header(hs, k); return v }
	atoi := func(k string) int { n, _ := strconv.Atoi(get(k)); return max(n, 0) }
	c := carried{ok: true, topic: get(HeaderTopic)}
	p, _ := strconv.ParseInt(get(HeaderPartition), 10, 32)
	c.partition = int32(p)
	c.offset, _ = strconv.ParseInt(get(HeaderOffset), 10, 64)
	c.deliveries = atoi(HeaderDeliveries)
	c.due, _ = time.Parse(time.RFC3339Nano, get(HeaderDue))
	st := &c.past
	st.failures, st.retries, st.attempts = atoi(HeaderFailures), atoi(HeaderRetries), atoi(HeaderAttempts)
	st.first, _ = time.Parse(time.RFC3339Nano, get(HeaderFirstFailure))
	st.origin = get(HeaderFirstNode)
	st.history = broker.DecodeHistory(get(HeaderHistory))
	if n := get(HeaderResumeNode); n != "" {
		st.resume.Node = n
		st.resume.Retry = atoi(HeaderResumeRetry)
		st.resume.Since, _ = time.Parse(time.RFC3339Nano, get(HeaderResumeSince))
	}
	return c
}

// A copySpec is what a copy of a record says beyond the record's own key,
// value and headers.
type copySpec struct {
	consumer   string
	topic      string // the first record's
	partition  int32
	offset     int64
	deliveries int
	due        time.Time // zero: none
	story      story
}

// copyHeaders returns the headers of a copy of a record whose headers are
// hs: hs less the Sluice-* story headers (the record's own, when it was a
// copy, or foreign ones it was forwarded with), then the story of spec.
func copyHeaders(hs []kgo.RecordHeader, spec copySpec) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+12)
	for _, h := range hs {
		if isStoryHeader(h.Key) {
			continue
		}
		out = append(out, h)
	}
	set := func(k, v string) { out = append(out, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	set(HeaderConsumer, spec.consumer)
	set(HeaderTopic, spec.topic)
	set(HeaderPartition, strconv.FormatInt(int64(spec.partition), 10))
	set(HeaderOffset, strconv.FormatInt(spec.offset, 10))
	set(HeaderDeliveries, strconv.Itoa(spec.deliveries))
	st := spec.story
	if st.failures > 0 {
		set(HeaderFailures, strconv.Itoa(st.failures))
	}
	if st.retries > 0 {
		set(HeaderRetries, strconv.Itoa(st.retries))
	}
	if st.attempts > 0 {
		set(HeaderAttempts, strconv.Itoa(st.attempts))
	}
	if !st.first.IsZero() {
		set(HeaderFirstFailure, st.first.UTC().Format(time.RFC3339Nano))
	}
	if st.origin != "" {
		set(HeaderFirstNode, st.origin)
	}
	if len(st.history) > 0 {
		set(HeaderHistory, broker.EncodeHistory(st.history))
	}
	if !spec.due.IsZero() {
		set(HeaderDue, spec.due.UTC().Format(time.RFC3339Nano))
	}
	if st.resume.Node != "" {
		set(HeaderResumeNode, st.resume.Node)
		set(HeaderResumeRetry, strconv.Itoa(st.resume.Retry))
		if !st.resume.Since.IsZero() {
			set(HeaderResumeSince, st.resume.Since.UTC().Format(time.RFC3339Nano))
		}
	}
	return out
}

// storyHeaders are the headers copyHeaders writes, which a copy of a copy
// writes afresh.
var storyHeaders = []string{HeaderConsumer, HeaderTopic, HeaderPartition, HeaderOffset,
	HeaderDeliveries, HeaderRetries, HeaderFailures, HeaderAttempts, HeaderFirstFailure,
	HeaderFirstNode, HeaderHistory, HeaderDue, HeaderResumeNode, HeaderResumeRetry, HeaderResumeSince}

// isStoryHeader reports whether key is one of the story headers, in any
// case.
func isStoryHeader(key string) bool {
	for _, k := range storyHeaders {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// merge returns env told from the record's first delivery: the calls of
// the earlier deliveries (st) before its own. Without a story each earlier
// delivery is taken as one call, the least it had.
func (st story) merge(env deadletter.Envelope, deliveries int) deadletter.Envelope {
	if st.attempts == 0 && len(st.history) == 0 {
		env.Attempts += max(deliveries-1, 0)
		return env
	}
	env.Attempts += st.attempts
	if len(st.history) > 0 {
		env.History = append(append([]deadletter.Attempt(nil), st.history...), env.History...)
	}
	if !st.first.IsZero() {
		env.FirstFailure = st.first
	}
	if st.origin != "" {
		env.OriginNode = st.origin
	}
	return env
}

// told returns the story of a record whose earlier deliveries told st,
// after a delivery that env tells (a failed run, a hand-off, a broker
// retry): its calls added, its history after st's, the newest
// broker.MaxHistory entries kept. An env without calls counts one. When
// env has no history, run adds one entry for the delivery (a failed run
// is told even when its node keeps no history); otherwise none is made
// up.
func (st story) told(env deadletter.Envelope, now time.Time, run bool) story {
	out := st
	out.resume = deadletter.Resume{}
	if env.LastFailure.IsZero() {
		env.LastFailure = now
	}
	out.attempts += max(env.Attempts, 1)
	first := env.FirstFailure
	if first.IsZero() {
		first = env.LastFailure
	}
	if out.first.IsZero() {
		out.first = first
	}
	if out.origin == "" {
		out.origin = env.OriginNode
	}
	hist := append([]deadletter.Attempt(nil), st.history...)
	if len(env.History) > 0 {
		for _, a := range env.History {
			if a.Node == "" {
				a.Node = env.OriginNode
			}
			hist = append(hist, a)
		}
	} else if run {
		text := env.ErrText
		if text == "" && env.Err != nil {
			text = env.Err.Error()
		}
		hist = append(hist, deadletter.Attempt{Time: env.LastFailure, Layer: resilience.ItemRetry,
			Retry: max(env.Attempts-1, 0), Err: text, Node: env.OriginNode})
	}
	if len(hist) > broker.MaxHistory {
		hist = hist[len(hist)-broker.MaxHistory:]
	}
	out.history = hist
	return out
}
