package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/resilience"
)

// ensureStream checks that the source's stream exists, and creates it
// from Declare when it does not. A stream that exists with other subjects
// than Declare's is refused: the source would consume what it does not
// expect, or miss what it does.
func ensureStream(ctx context.Context, js jetstream.JetStream, c *SourceConfig) error {
	st, err := js.Stream(ctx, c.Stream)
	switch {
	case err == nil:
		if err := copiesFit(st.CachedInfo().Config, c); err != nil {
			return err
		}
		if c.Declare != nil {
			have := st.CachedInfo().Config.Subjects
			if !sameSet(have, c.Declare.Subjects) {
				return resilience.MarkPermanent(&ConfigError{Field: "Declare.Subjects", Value: c.Declare.Subjects,
					Reason: fmt.Sprintf("stream %q exists with subjects %v", c.Stream, have)})
			}
		}
		return nil
	case errors.Is(err, jetstream.ErrStreamNotFound) && c.Declare != nil:
		d := c.Declare
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: c.Stream, Subjects: d.Subjects, Storage: d.Storage, Replicas: max(d.Replicas, 1),
			MaxAge: d.MaxAge, Duplicates: d.Duplicates,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return classify(fmt.Errorf("nats: create stream %q: %w", c.Stream, err))
		}
		return nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return resilience.MarkPermanent(fmt.Errorf("nats: stream %q: %w (give SourceConfig.Declare to create it)", c.Stream, err))
	default:
		return classify(fmt.Errorf("nats: stream %q: %w", c.Stream, err))
	}
}

// copiesFit refuses MaxDeliveries on a stream where the counted copy of a
// message that failed a run (see [HeaderFailures]) cannot go: a mirror,
// which takes no publishes, and a stream that keeps a number of messages
// per subject, where the copy, published to its message's subject, would
// evict a newer message of that subject that no consumer has read.
func copiesFit(st jetstream.StreamConfig, c *SourceConfig) error {
	if c.MaxDeliveries <= 0 {
		return nil
	}
	switch {
	case st.Mirror != nil:
		return resilience.MarkPermanent(&ConfigError{Field: "MaxDeliveries", Value: c.MaxDeliveries,
			Reason: fmt.Sprintf("stream %q is a mirror of %q, which takes no publishes: the poison guard counts a failed run in a copy of the message published to its stream; consume the origin stream, or set MaxDeliveries 0", c.Stream, st.Mirror.Name)})
	case st.MaxMsgsPerSubject > 0:
		return resilience.MarkPermanent(&ConfigError{Field: "MaxDeliveries", Value: c.MaxDeliveries,
			Reason: fmt.Sprintf("stream %q keeps %d messages per subject (MaxMsgsPerSubject): the poison guard counts a failed run in a copy of the message published to its subject, which would evict a newer message of that subject; set MaxDeliveries 0 on such a stream", c.Stream, st.MaxMsgsPerSubject)})
	}
	return nil
}

// consumerConfig is the durable consumer the source asks for.
func consumerConfig(c *SourceConfig) jetstream.ConsumerConfig {
	maxDeliver := c.MaxDeliver
	if maxDeliver == 0 {
		maxDeliver = -1
	}
	return jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    maxDeliver,
		BackOff:       c.BackOff,
		FilterSubject: c.FilterSubject,
		MaxAckPending: c.MaxAckPending,
	}
}

// ensureConsumer returns the durable consumer, created when it does not
// exist. One that exists must have the settings of the config that decide
// how messages come back: AckWait, MaxDeliver, BackOff and FilterSubject;
// a difference is refused, naming the field, rather than changed under the
// other processes that share the consumer.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, c *SourceConfig) (jetstream.Consumer, error) {
	want := consumerConfig(c)
	cons, err := js.Consumer(ctx, c.Stream, c.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = js.CreateConsumer(ctx, c.Stream, want)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			// Another process created it meanwhile.
			cons, err = js.Consumer(ctx, c.Stream, c.Consumer)
		}
	}
	if err != nil {
		return nil, classify(fmt.Errorf("nats: consumer %q of stream %q: %w", c.Consumer, c.Stream, err))
	}
	have := cons.CachedInfo().Config
	differs := func(field string, value, existing any) error {
		return resilience.MarkPermanent(&ConfigError{Field: field, Value: value,
			Reason: fmt.Sprintf("consumer %q of stream %q exists with %v; delete it or use its settings", c.Consumer, c.Stream, existing)})
	}
	switch {
	case have.AckPolicy != jetstream.AckExplicitPolicy:
		return nil, differs("Consumer", c.Consumer, "ack policy "+have.AckPolicy.String()+" (the source acks each message)")
	case have.DeliverSubject != "":
		return nil, differs("Consumer", c.Consumer, "a deliver subject (a push consumer; the source pulls)")
	case len(c.BackOff) == 0 && have.AckWait != want.AckWait:
		return nil, differs("AckWait", want.AckWait, have.AckWait)
	case have.MaxDeliver != want.MaxDeliver:
		return nil, differs("MaxDeliver", c.MaxDeliver, have.MaxDeliver)
	case !slices.Equal(have.BackOff, want.BackOff):
		return nil, differs("BackOff", want.BackOff, have.BackOff)
	case have.FilterSubject != want.FilterSubject:
		return nil, differs("FilterSubject", want.FilterSubject, have.FilterSubject)
	}
	return cons, nil
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
