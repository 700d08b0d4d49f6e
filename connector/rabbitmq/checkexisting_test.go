package rabbitmq_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
)

// An existing queue that dead-letters into q_dlx, with other arguments of
// its own, opens with Declare nil: Open learns each argument from the
// broker's refusal and declares again, until the broker accepts. A queue
// with a long name (the broker cuts its refusal at 255 bytes) still gets
// the dead-letter exchange checked.
func TestOpenChecksAQueueWithOtherArguments(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		durable bool
		args    amqp.Table
	}{
		"classic x-max-length":     {false, amqp.Table{"x-max-length": int32(1000)}},
		"classic x-max-priority":   {true, amqp.Table{"x-max-priority": int32(5)}},
		"quorum x-delivery-limit":  {true, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(10)}},
		"classic ttl and overflow": {false, amqp.Table{"x-message-ttl": int64(60000), "x-overflow": "reject-publish"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			q := uniqueName(t)
			a.cleanupTopology(q)
			args := amqp.Table{"x-dead-letter-exchange": q + "_dlx"}
			for k, v := range c.args {
				args[k] = v
			}
			_, err := a.channel().QueueDeclare(q, c.durable, false, false, false, args)
			require.NoError(t, err)
			src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q,
				Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second, Durable: true}})
			require.NoError(t, err)
			ctx := testContext(t)
			err = src.Open(ctx)
			if err == nil {
				_ = src.Close(ctx)
			}
			require.NoError(t, err, "a correctly dead-lettering queue with one more argument")
		})
	}
}
