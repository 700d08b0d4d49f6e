package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

func TestValidateNamesEveryField(t *testing.T) {
	t.Parallel()
	_, err := kafka.NewSource(kafka.SourceConfig{})
	require.Error(t, err)
	assert.ErrorIs(t, err, kafka.ErrInvalidConfig)
	for _, field := range []string{"Brokers", "Topic", "Group"} {
		assert.ErrorContains(t, err, "kafka: "+field+" = ")
	}

	cases := []struct {
		name  string
		cfg   func(*kafka.SourceConfig)
		field string
	}{
		{"broker without port", func(c *kafka.SourceConfig) { c.Brokers = []string{"localhost"} }, "Brokers[0]"},
		{"broker without host", func(c *kafka.SourceConfig) { c.Brokers = []string{"h:9092", ":9092"} }, "Brokers[1]"},
		{"broker port out of range", func(c *kafka.SourceConfig) { c.Brokers = []string{"h:70000"} }, "Brokers[0]"},
		{"topic with a slash", func(c *kafka.SourceConfig) { c.Topic = "a/b" }, "Topic"},
		{"topic dot", func(c *kafka.SourceConfig) { c.Topic = ".." }, "Topic"},
		{"topic too long", func(c *kafka.SourceConfig) { c.Topic = strings.Repeat("a", 250) }, "Topic"},
		{"negative in flight", func(c *kafka.SourceConfig) { c.MaxInFlight = -1 }, "MaxInFlight"},
		{"negative poll", func(c *kafka.SourceConfig) { c.MaxPollRecords = -1 }, "MaxPollRecords"},
		{"negative commit every", func(c *kafka.SourceConfig) { c.CommitEvery = -1 }, "CommitEvery"},
		{"negative interval", func(c *kafka.SourceConfig) { c.CommitInterval = -time.Second }, "CommitInterval"},
		{"tiny interval", func(c *kafka.SourceConfig) { c.CommitInterval = time.Microsecond }, "CommitInterval"},
		{"revoke past the rebalance timeout", func(c *kafka.SourceConfig) { c.RevokeTimeout = time.Minute }, "RevokeTimeout"},
		{"short session", func(c *kafka.SourceConfig) { c.SessionTimeout = time.Millisecond }, "SessionTimeout"},
		{"negative drain", func(c *kafka.SourceConfig) { c.DrainTimeout = -1 }, "DrainTimeout"},
		{"negative close", func(c *kafka.SourceConfig) { c.CloseTimeout = -1 }, "CloseTimeout"},
		{"negative dial", func(c *kafka.SourceConfig) { c.DialTimeout = -1 }, "DialTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := kafka.SourceConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "orders", Group: "billing"}
			tc.cfg(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			var ce *kafka.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.field, ce.Field)
			assert.True(t, strings.HasPrefix(err.Error(), "kafka: "+tc.field+" = "), err.Error())
		})
	}
	ok := kafka.SourceConfig{Brokers: []string{"127.0.0.1:9092", "[::1]:9093"}, Topic: "orders.v1_a-b", Group: "billing"}
	require.NoError(t, ok.Validate())
	src, err := kafka.NewSource(ok)
	require.NoError(t, err)
	got := src.Config()
	assert.Equal(t, kafka.DefaultCommitInterval, got.CommitInterval)
	assert.Equal(t, kafka.DefaultMaxInFlight, got.MaxInFlight)
	assert.Equal(t, kafka.DefaultMaxInFlight/2, got.CommitEvery)
	assert.Equal(t, kafka.DefaultRevokeTimeout, got.RevokeTimeout)
	assert.NotNil(t, got.Clock)
}

func TestOpenUnknownTopicIsPermanent(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	src, err := kafka.NewSource(a.config(uniqueName(t)))
	require.NoError(t, err)
	err = src.Open(testContext(t))
	require.ErrorIs(t, err, kafka.ErrUnknownTopic)
	assert.False(t, resilience.IsTransient(err), "a missing topic does not come back by retrying: %v", err)
	assert.ErrorIs(t, src.Run(testContext(t), nil), kafka.ErrNotOpen)
	require.NoError(t, src.Close(testContext(t)), "Close after a failed Open is a no-op")
}

func TestOpenUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	cfg := kafka.SourceConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "orders", Group: "g", DialTimeout: 500 * time.Millisecond}
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = src.Open(ctx)
	require.Error(t, err)
	assert.True(t, errors.Is(err, kafka.ErrConnectionLost), "%v", err)
	assert.True(t, resilience.IsTransient(err), "a cluster out of reach may come back: %v", err)
}
