package kafka

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tier topics are named "<topic>.retry.<delay>", shortest first.
func TestTierTopics(t *testing.T) {
	t.Parallel()
	r := RetryTopics{Enabled: true, Delays: []time.Duration{30 * time.Second, 500 * time.Millisecond, 5 * time.Minute}}
	assert.Equal(t, []string{"orders.retry.500ms", "orders.retry.30s", "orders.retry.5m0s"}, r.TierTopics("orders"))
	assert.Nil(t, RetryTopics{Delays: r.Delays}.TierTopics("orders"), "no tiers when not enabled")
	assert.Equal(t, "orders.dlt", r.DeadLetterTopicOf("orders"))
	r.DeadLetterTopic = "dead"
	assert.Equal(t, "dead", r.DeadLetterTopicOf("orders"))
	d, ok := r.tierDelay("orders", "orders.retry.30s")
	assert.True(t, ok)
	assert.Equal(t, 30*time.Second, d)
	_, ok = r.tierDelay("orders", "orders.retry.31s")
	assert.False(t, ok, "not a tier of the config")
	_, ok = r.tierDelay("orders", "orders")
	assert.False(t, ok)
}

// A wait goes to the first tier whose delay covers it; past the longest,
// to the longest.
func TestTierFor(t *testing.T) {
	t.Parallel()
	r := RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute, time.Second, 10 * time.Second}}
	for _, c := range []struct{ wait, tier time.Duration }{
		{0, time.Second},
		{time.Millisecond, time.Second},
		{time.Second, time.Second},
		{time.Second + 1, 10 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{11 * time.Second, time.Minute},
		{time.Minute, time.Minute},
		{time.Hour, time.Minute},
	} {
		got, ok := r.tierFor(c.wait)
		assert.True(t, ok)
		assert.Equal(t, c.tier, got, "wait %s", c.wait)
	}
	_, ok := RetryTopics{}.tierFor(time.Second)
	assert.False(t, ok, "no tiers")
}

// Every bad field is refused, each with a ConfigError naming it.
func TestRetryTopicsProblems(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		r     RetryTopics
		field string
	}{
		{"zero delay", RetryTopics{Delays: []time.Duration{time.Second, 0}}, "Retry.Delays[1]"},
		{"negative delay", RetryTopics{Delays: []time.Duration{-time.Second}}, "Retry.Delays[0]"},
		{"delay past a week", RetryTopics{Delays: []time.Duration{8 * 24 * time.Hour}}, "Retry.Delays[0]"},
		{"twice", RetryTopics{Delays: []time.Duration{time.Second, time.Second}}, "Retry.Delays[1]"},
		{"enabled without tiers", RetryTopics{Enabled: true}, "Retry.Delays"},
		{"a name Kafka refuses", RetryTopics{Enabled: true, Delays: []time.Duration{1500 * time.Nanosecond}}, "Retry.Delays"},
		{"negative MaxRetries", RetryTopics{MaxRetries: -1}, "Retry.MaxRetries"},
		{"MaxRetries past 100", RetryTopics{MaxRetries: 101}, "Retry.MaxRetries"},
		{"negative HandOffAfter", RetryTopics{HandOffAfter: -1}, "Retry.HandOffAfter"},
		{"HandOffAfter past the longest tier", RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute, time.Second},
			HandOffAfter: time.Hour}, "Retry.HandOffAfter"},
		{"dead letters into the topic", RetryTopics{DeadLetterTopic: "orders"}, "Retry.DeadLetterTopic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := validateRetry(c.r, "orders")
			require.Error(t, err)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, c.field, ce.Field)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.field)
		})
	}
	assert.NoError(t, validateRetry(RetryTopics{}, "orders"), "the zero value is valid")
	assert.NoError(t, validateRetry(RetryTopics{Enabled: true, Delays: []time.Duration{time.Second, time.Hour},
		MaxRetries: 100, HandOffAfter: time.Second}, "orders"))
	assert.NoError(t, validateRetry(RetryTopics{Enabled: true, Delays: []time.Duration{time.Second, time.Hour},
		HandOffAfter: time.Hour}, "orders"), "HandOffAfter may be the longest tier's delay")
	assert.Equal(t, DefaultMaxRetries, RetryTopics{}.maxRetries())
}

// NewSource refuses the poison, crash and retry settings it cannot use,
// each naming its field, all of them joined.
func TestSourceGuardSettingsRefused(t *testing.T) {
	t.Parallel()
	_, err := NewSource(SourceConfig{Brokers: []string{"localhost:9092"}, Topic: "orders", Group: "g",
		MaxDeliveries: -1, CrashAloneWait: time.Second,
		Retry: RetryTopics{Enabled: true, Delays: []time.Duration{time.Second, -time.Second}}})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	for _, f := range []string{"MaxDeliveries", "CrashAloneWait", "Retry.Delays[1]"} {
		assert.Contains(t, err.Error(), "kafka: "+f+" = ", f)
	}
	src, err := NewSource(SourceConfig{Brokers: []string{"localhost:9092"}, Topic: "orders", Group: "g",
		CrashLedger: "/tmp/x.ledger", Retry: RetryTopics{Enabled: true, Delays: []time.Duration{time.Minute, time.Second}}})
	require.NoError(t, err)
	assert.Equal(t, DefaultCrashAloneWait, src.Config().CrashAloneWait, "the default with a ledger")
	assert.Equal(t, []string{"orders", "orders.retry.1s", "orders.retry.1m0s"}, src.topics(), "the source reads its tiers")
	assert.Zero(t, src.HandOffAfter())
}
