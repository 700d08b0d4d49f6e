package kafka_test

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// Concurrent Writes share the client's batches (the Publisher's godoc
// says so). When the topic refuses a batch as too large
// (MESSAGE_TOO_LARGE, max.message.bytes) because one record of it is, the
// client fails every record of the batch with that error, and answer()
// turns each into a permanent ErrRecordTooLarge: small records, stored
// fine alone, fail permanently as "record too large", blamed for a
// neighbour. They should be told apart (the Write whose record alone is
// not too large is not the item's fault: retried, or at least blameless).
//
// Deterministic: the first produce request is held, so the four Writes
// that follow are in one batch when it is released (the idempotent
// producer sends one request at a time per broker).
func TestPublisherBatchTooLargeBlamesOnlyTheLargeRecord(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1, "max.message.bytes", "2000")
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic, Clock: clock,
		Record: func(v []byte) (*kgo.Record, error) { return &kgo.Record{Key: []byte("k"), Value: v}, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	held, release := holdProduce(t, c)

	first := make(chan error, 1)
	go func() { first <- pub.Write(ctx, []byte("first")) }()
	<-held
	big := make([]byte, 5000)
	_, _ = rand.Read(big) // incompressible
	errs := make([]chan error, 4)
	for i := range errs {
		errs[i] = make(chan error, 1)
		v := big
		if i > 0 {
			v = fmt.Appendf(nil, "small-%d", i)
		}
		go func() { errs[i] <- pub.Write(ctx, v) }()
	}
	// Every record handed to the client: five ack timers wait on clock.
	require.NoError(t, clock.BlockUntilContext(ctx, 5))
	release()
	require.NoError(t, <-first)
	require.ErrorIs(t, <-errs[0], kafka.ErrRecordTooLarge, "the big record is refused")
	for i := 1; i < len(errs); i++ {
		err := <-errs[i]
		t.Logf("small-%d: %v", i, err)
		if err != nil {
			assert.NotErrorIs(t, err, kafka.ErrRecordTooLarge, "small-%d is not too large", i)
			assert.True(t, resilience.IsTransient(err) || resilience.IsBlameless(err),
				"small-%d failed for its neighbour, permanently and to blame: %v", i, err)
		}
	}
}
