package rabbitmq_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
)

// fields returns the fields of the config errors joined in err.
func fields(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		var ce *rabbitmq.ConfigError
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if errors.As(e, &ce) {
			out = append(out, ce.Field)
		}
	}
	walk(err)
	return out
}

// A queue name whose derived names (q_dlx, q_retry, q_retry_<d>) pass
// AMQP's 255 bytes is refused by NewSource, before anything is declared,
// naming the field; so is a name itself too long, and a publisher's
// exchange or routing key. A name that fits, derived names included,
// passes.
func TestNamesFitAMQP(t *testing.T) {
	t.Parallel()
	const url = "amqp://localhost/"
	retry := rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delays: []time.Duration{time.Second, time.Minute}}
	for _, c := range []struct {
		name  string
		queue string
		retry rabbitmq.RetryTopology
		bad   bool
	}{
		{"250 bytes with a retry topology", strings.Repeat("q", 250), retry, true},
		{"256 bytes", strings.Repeat("q", 256), rabbitmq.RetryTopology{}, true},
		{"255 bytes without a topology", strings.Repeat("q", 255), rabbitmq.RetryTopology{}, false},
		{"246 bytes with tiers: q_retry_1m is 255", strings.Repeat("q", 246), retry, false},
		{"247 bytes with tiers", strings.Repeat("q", 247), retry, true},
	} {
		_, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: url, Queue: c.queue, Retry: c.retry})
		if !c.bad {
			assert.NoError(t, err, c.name)
			continue
		}
		require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig, c.name)
		assert.Equal(t, []string{"Queue"}, fields(err), c.name)
		assert.Contains(t, err.Error(), "255 bytes", c.name)
	}
	_, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[string]{URL: url, Exchange: strings.Repeat("e", 256),
		RoutingKey: strings.Repeat("k", 256), Publishing: func(string) (amqp.Publishing, error) { return amqp.Publishing{}, nil }})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	assert.ElementsMatch(t, []string{"Exchange", "RoutingKey"}, fields(err))
}

// Every problem of the retry tiers is reported: Delays that do not rise
// are reported beside Delay set with them; and a HandOffAfter longer than
// every tier, under which no wait could ever be handed off, is refused.
func TestRetryTiersReportEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q",
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second, Delays: []time.Duration{time.Minute, time.Second}}})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	assert.ElementsMatch(t, []string{"Retry.Delay", "Retry.Delays[1]"}, fields(err))

	_, err = rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q",
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delays: []time.Duration{time.Second, time.Minute}, HandOffAfter: 2 * time.Minute}})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	assert.Equal(t, []string{"Retry.HandOffAfter"}, fields(err))
	assert.Contains(t, err.Error(), "1m0s")

	_, err = rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q",
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Minute, HandOffAfter: time.Minute}})
	assert.NoError(t, err, "a hand-off as long as the longest tier is taken")
}
