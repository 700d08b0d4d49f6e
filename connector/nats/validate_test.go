package nats_test

import (
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
)

// Each config says every problem at once through Validate, naming each
// field, and its constructor refuses it with that same error; a valid
// config validates.
func TestConfigsValidateTheSameWay(t *testing.T) {
	t.Parallel()
	bad := nats.PubRetry{MaxRetry: -1, Delay: -time.Second}
	cases := []struct {
		name   string
		check  func() error
		build  func() error
		fields []string
	}{
		{"SourceConfig",
			nats.SourceConfig{}.Validate,
			func() error { _, err := nats.NewSource(nats.SourceConfig{}); return err },
			[]string{"URL", "Stream", "Consumer"}},
		{"PublisherConfig",
			nats.PublisherConfig[string]{AckTimeout: -1, PubRetry: bad, DialTimeout: -1, CloseTimeout: -1}.Validate,
			func() error {
				_, err := nats.NewPublisher(nats.PublisherConfig[string]{AckTimeout: -1, PubRetry: bad, DialTimeout: -1, CloseTimeout: -1})
				return err
			},
			[]string{"Message", "Subject", "URL", "AckTimeout", "PubRetry.MaxRetry", "PubRetry.Delay", "DialTimeout", "CloseTimeout"}},
		{"DeadLetterConfig",
			nats.DeadLetterConfig{AckTimeout: -1}.Validate,
			func() error { _, err := nats.NewDeadLetterPublisher(nats.DeadLetterConfig{AckTimeout: -1}); return err },
			[]string{"Subject", "URL", "AckTimeout"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.check()
			require.ErrorIs(t, err, nats.ErrInvalidConfig)
			for _, f := range c.fields {
				assert.Contains(t, fields(err), f)
			}
			berr := c.build()
			require.Error(t, berr)
			assert.Equal(t, err.Error(), berr.Error())
		})
	}
	require.NoError(t, nats.PublisherConfig[string]{URL: "nats://127.0.0.1:4222", Subject: "s",
		Message: func(string) (*natsgo.Msg, error) { return nil, nil }}.Validate())
	require.NoError(t, nats.DeadLetterConfig{URL: "nats://127.0.0.1:4222", Subject: "s"}.Validate())
}
