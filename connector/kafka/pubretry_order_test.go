package kafka_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Mid-stream the cluster goes away (connections closed, dials refused):
// records in flight stay with the client and are sent again; records
// franz-go fails with the dial error end never sent (PubRetry writes them
// again) when the client wrote no produce request since it took them,
// else unknown (it cannot say none of their sends was stored), transient
// and blameless, and the engine's item retry writes them again. Under a
// Keyed sink, k#i+1 does not land before k#i, and here, where none was
// stored, nothing is stored twice.
func TestPublisherKeyOrderUnderPubRetry(t *testing.T) {
	t.Parallel()
	c := shared(t)
	topic := pubName(t)
	createTopicOn(t, c, topic, 2)
	g := &gate{}
	clock := clockwork.NewFakeClock()
	var shutOnce atomic.Bool
	var shutDials atomic.Int64
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[keyed]{Brokers: c.ListenAddrs(), Topic: topic,
		Dial: g.Dial, Clock: clock, AckTimeout: 1000 * time.Hour, DeliveryTimeout: time.Second,
		PubRetry: kafka.PubRetry{Enabled: true, MaxRetry: 50, Delay: time.Minute},
		Record: func(k keyed) (*kgo.Record, error) {
			if k.Key == "k01" && k.Seq == 8 && shutOnce.CompareAndSwap(false, true) {
				g.Shut()
				shutDials.Store(int64(g.Dials()))
			}
			return keyedRecord(k)
		}})
	require.NoError(t, err)
	b := pipeline.New("order-retry", pipeline.WithClock(clock))
	in := pipeline.Source(b, "items", pipelinetest.NewSliceSource(keyedItems(4, 20)...))
	pipeline.Sink(b, "publish", in, pub, pipeline.Keyed(4, func(k keyed) string { return k.Key }))
	p, err := b.Build()
	require.NoError(t, err)
	res := make(chan error, 1)
	go func() {
		_, err := p.Run(pubContext(t))
		res <- err
	}()
	var runErr error
	opened := false
	advanceUntil(t, clock, time.Minute, func() bool {
		if !opened && shutOnce.Load() && int64(g.Dials()) > shutDials.Load()+8 {
			g.Open()
			opened = true
		}
		select {
		case runErr = <-res:
			return true
		default:
			return false
		}
	})
	require.NoError(t, runErr, "every record was written again until the cluster came back (transient %v, blameless %v, unknown %v)",
		resilience.IsTransient(runErr), resilience.IsBlameless(runErr), errors.Is(runErr, kafka.ErrOutcomeUnknown))
	t.Logf("retries %d unknown %d", pub.Retries(), pub.Unknown())
	checkKeyOrder(t, readTopic(t, c.ListenAddrs(), topic, 4*20, kgo.ReadUncommitted()), 4, 20)
	assert.Equal(t, int64(4*20), countTopic(t, c.ListenAddrs(), topic), "nothing stored twice")
}
