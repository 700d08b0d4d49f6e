package rabbitmq_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
)

// Each config says every problem at once through Validate, naming each
// field, and its constructor refuses it with that same error; a valid
// config validates.
func TestConfigsValidateTheSameWay(t *testing.T) {
	t.Parallel()
	bad := rabbitmq.PubRetry{MaxRetry: -1, Delay: -time.Second}
	pub := rabbitmq.PublisherConfig[string]{Mandatory: true, PubRetry: bad, DialTimeout: -1, CloseTimeout: -1}
	dl := rabbitmq.DeadLetterConfig{ConfirmTimeout: -1, DialTimeout: -1}
	cases := []struct {
		name   string
		check  func() error
		build  func() error
		fields []string
	}{
		{"SourceConfig",
			rabbitmq.SourceConfig{}.Validate,
			func() error { _, err := rabbitmq.NewSource(rabbitmq.SourceConfig{}); return err },
			[]string{"URL", "Queue"}},
		{"PublisherConfig", pub.Validate,
			func() error { _, err := rabbitmq.NewPublisher(pub); return err },
			[]string{"Publishing", "URL", "Mandatory", "PubRetry.MaxRetry", "PubRetry.Delay", "DialTimeout", "CloseTimeout"}},
		{"DeadLetterConfig", dl.Validate,
			func() error { _, err := rabbitmq.NewDeadLetterPublisher(dl); return err },
			[]string{"URL", "Confirms.Timeout", "DialTimeout", "Exchange"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.check()
			require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
			for _, f := range c.fields {
				assert.Contains(t, fields(err), f)
			}
			berr := c.build()
			require.Error(t, berr)
			assert.Equal(t, err.Error(), berr.Error())
		})
	}
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	require.NoError(t, rabbitmq.SourceConfig{URL: url, Queue: "q"}.Validate())
	require.NoError(t, rabbitmq.PublisherConfig[string]{URL: url, Exchange: "x",
		Publishing: func(string) (amqp.Publishing, error) { return amqp.Publishing{}, nil }}.Validate())
	require.NoError(t, rabbitmq.DeadLetterConfig{URL: url, Exchange: "x"}.Validate())
}
