package rabbitmq_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
)

// SourceConfig.Validate reports, without a broker, what NewSource refuses:
// every problem, each a *ConfigError naming its field, as
// nats.SourceConfig.Validate does.
func TestSourceConfigValidate(t *testing.T) {
	t.Parallel()
	err := rabbitmq.SourceConfig{}.Validate()
	require.Error(t, err)
	var ce *rabbitmq.ConfigError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Contains(t, fields(err), "URL")
	assert.Contains(t, fields(err), "Queue")
	_, nerr := rabbitmq.NewSource(rabbitmq.SourceConfig{})
	assert.Equal(t, err.Error(), nerr.Error())

	assert.NoError(t, rabbitmq.SourceConfig{URL: "amqp://guest:guest@127.0.0.1:5672/", Queue: "orders"}.Validate())
}
