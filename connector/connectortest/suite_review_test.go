package connectortest_test

// Review 18: this test FAILS ON PURPOSE. It shows a broken connector that
// the suite passes; production code and the suite are not fixed here.

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// lateVariant redelivers twelve times later than asked: 4.8 s instead of
// 400 ms. brokerRetry's upper bound is delay + 10 s, so it passes; with
// NATS the bound also exceeds the harness's AckWait (5 s), so a connector
// that never naks with a delay and lets the ack wait run out passes too.
var lateVariant = variant{
	name: "retries_too_late", catches: "BrokerRetryAfterItsDelay", says: "after the failure",
	source: func(c *rabbitmq.SourceConfig) { c.Retry.Delay *= 12 },
}

func init() { variants = append(variants, lateVariant) }

func TestReviewSuiteFailsLateBrokerRetry(t *testing.T) {
	t.Parallel()
	servicetest.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*connectortest.CaseTimeout)
	defer cancel()
	out, err := runSuite(ctx, lateVariant.name, lateVariant.catches)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the suite fails %s:\n%s", lateVariant.name, out)
	assert.Contains(t, out, "--- FAIL: TestBroken/"+lateVariant.name+"/"+lateVariant.catches+" ")
}
