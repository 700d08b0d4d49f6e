package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A topic deleted while the source consumes it fails the run, once the
// fetches have said it is unknown for kafka.MissingTopicWait on the
// source's clock and the cluster confirms it, with a permanent error
// naming the topic, rather than the source polling on without end. The
// test advances the fake clock while the source polls (a real wait for
// the client's fetches, bounded by the test's context).
func TestDeletedTopicFailsTheRun(t *testing.T) {
	t.Parallel() // the client takes some 13 s to see the deletion
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "first"))
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := a.config(topic)
	cfg.Clock = clock
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	// The client learns of the deletion from its metadata: refreshed
	// often here.
	kafka.AddClientOpts(src, kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(time.Second), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, src.Open(testContext(t)))
	defer func() { _ = src.Close(context.Background()) }()

	got := make(chan kafka.Message, 10)
	done := make(chan error, 1)
	emit := &recordingEmitter{on: func(m kafka.Message, settle func(node.Outcome)) {
		settle(node.Delivered)
		got <- m
	}}
	go func() { done <- src.Run(testContext(t), emit) }()
	select {
	case m := <-got:
		require.Equal(t, "first", string(m.Value))
	case <-testContext(t).Done():
		t.Fatal("the source read nothing")
	}
	_, err = a.adm.DeleteTopics(testContext(t), topic)
	require.NoError(t, err)

	tick := time.NewTicker(20 * time.Millisecond) // polling the source's progress
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			require.Error(t, err)
			assert.ErrorIs(t, err, kafka.ErrUnknownTopic)
			assert.Contains(t, err.Error(), topic)
			assert.False(t, resilience.Classifier{}.IsTransient(err), "permanent")
			return
		case <-tick.C:
			clock.Advance(kafka.MissingTopicWait / 4)
		case <-testContext(t).Done():
			t.Fatal("Run went on polling a deleted topic")
		}
	}
}
