package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// Tier records waiting in the due gate take none of MaxInFlight: their
// partition is paused, and the main topic goes on. With MaxInFlight 2 and
// two tier records held an hour (the clock is not advanced), a fresh
// record of the main topic is read (the test's real wait for it is
// bounded at 10 s, polling the cluster).
func TestTierGateLeavesMainTopicRoom(t *testing.T) {
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	tier := kafka.TierTopic(topic, time.Hour)
	a.topic(tier, 1)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for i := range 4 {
		r := rec(0, "", fmt.Sprintf("waiting-%d", i))
		r.Headers = []kgo.RecordHeader{
			{Key: kafka.HeaderConsumer, Value: []byte(topic + "/" + topic)},
			{Key: kafka.HeaderDue, Value: []byte(clock.Now().Add(time.Hour).Format(time.RFC3339Nano))},
			{Key: kafka.HeaderDeliveries, Value: []byte("1")},
		}
		a.produce(tier, r)
	}
	cfg := a.config(topic)
	cfg.Clock = clock
	cfg.MaxInFlight = 2
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)

	var seen calls
	b := pipeline.New("tier-starve", pipeline.WithClock(clock))
	pipeline.ForEach(b, "store", pipeline.Source(b, "read", src), func(_ context.Context, m kafka.Message) error {
		seen.add(string(m.Value), clock.Now(), m.Deliveries)
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	done := runAsync(t, p, ctx)
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "the tier's records held, not due", func() bool { return kafka.HeldInTiers(src) == 2 })

	a.produce(topic, rec(0, "", "fresh"))
	waitWithin(t, 10*time.Second, func() bool {
		at, _ := seen.of("fresh")
		return len(at) == 1
	}, func() string {
		return fmt.Sprintf("the main topic's record was not read in 10 s while %d tier records wait an hour (clock not advanced)", kafka.HeldInTiers(src))
	})
}
