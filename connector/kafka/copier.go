package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/resilience"
)

// A copier produces the copies a source makes of its records: to the
// tier that covers a wait (a hand-off, a broker retry), or to the topic
// itself (a run the record failed, under the poison guard). Each copy is
// produced on the idempotent producer with acks=all, and the copier waits
// for the ack: only then does the source settle the original.
type copier struct {
	cl       *kgo.Client
	sent     *sentWatch // counts cl's produce requests
	clock    clockwork.Clock
	timeout  time.Duration
	consumer string // HeaderConsumer of the copies
	topic    string // the topic the source reads
	retry    RetryTopics
}

// tierCopy produces the copy of rec (spec tells its story) to the tier
// that covers wait, due wait from now, and returns the tier's topic. An
// error is an *unknownError when the copy may be stored.
func (c *copier) tierCopy(ctx context.Context, rec *kgo.Record, spec copySpec, wait time.Duration) (string, error) {
	delay, ok := c.retry.tierFor(wait)
	if !ok {
		return "", errors.New("kafka: the source has no retry tiers")
	}
	spec.due = c.clock.Now().Add(max(wait, 0))
	topic := TierTopic(c.topic, delay)
	return topic, c.produce(ctx, topic, rec, spec)
}

// topicCopy produces the copy of rec (spec tells its story) to the topic
// the source reads, in the partition of the record first produced.
func (c *copier) topicCopy(ctx context.Context, rec *kgo.Record, spec copySpec) error {
	spec.due = time.Time{}
	return c.produce(ctx, c.topic, rec, spec)
}

// produce produces the copy of rec with spec's story to topic, in the
// partition number of the record first produced (modulo topic's count:
// see copyPartitioner), and waits for its ack.
func (c *copier) produce(ctx context.Context, topic string, rec *kgo.Record, spec copySpec) error {
	spec.consumer = c.consumer
	cp := &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Partition: spec.partition,
		Headers: copyHeaders(rec.Headers, spec)}
	return produceAcked(ctx, c.cl, c.sent, c.clock, c.timeout, cp, nil)
}

// close closes the copier's client, waiting at most timeout for what is
// in flight.
func (c *copier) close(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = c.cl.Flush(ctx)
	c.cl.Close()
}

// declareTiers creates the tier topics of topic that do not exist, with
// topic's partition count and replication factor. A tier that exists is
// left as it is.
func declareTiers(ctx context.Context, adm *kadm.Client, topic string, tiers []string) error {
	ds, err := adm.ListTopics(ctx, append([]string{topic}, tiers...)...)
	if err != nil {
		return resilience.MarkTransient(fmt.Errorf("kafka: describe topic %q and its tiers: %w", topic, err))
	}
	main, ok := ds[topic]
	if !ok || main.Err != nil {
		why := kerr.UnknownTopicOrPartition
		if ok && main.Err != nil {
			return fmt.Errorf("kafka: describe topic %q: %w", topic, main.Err)
		}
		return resilience.MarkPermanent(fmt.Errorf("kafka: Retry.Declare: topic %q: %w", topic, why))
	}
	partitions := int32(len(main.Partitions))
	replicas := int16(1)
	for _, p := range main.Partitions {
		replicas = max(replicas, int16(len(p.Replicas)))
	}
	var missing []string
	for _, t := range tiers {
		if d, ok := ds[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}

	res, err := adm.CreateTopics(ctx, partitions, replicas, nil, missing...)
	if err != nil {
		return resilience.MarkTransient(fmt.Errorf("kafka: create the tiers of topic %q: %w", topic, err))
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("kafka: create tier %q: %w", r.Topic, r.Err)
		}
	}
	return nil
}
