package connectortest_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/rabbitmq"
)

// A connector's test checks it against the suite with a Harness: here the
// RabbitMQ connector's (newRabbit, in this package's tests; the harness
// documented for readers is connector/rabbitmq/conformance_test.go's).
// Run needs a *testing.T and a broker, so this example is compiled but not
// run: the function below is a test of the connector's package.
func ExampleRun() {
	var h connectortest.Harness[rabbitmq.Message] = newRabbit(os.Getenv("AMQP_URL"))
	testConformance := func(t *testing.T) {
		connectortest.Run(t, h) // one parallel subtest per case
	}
	_ = testConformance
}

// The SIGKILL and crash cases run the test binary again as a consumer
// process: TestMain hands that process to ChildMain, which returns at once
// in the test process itself. (Compiled but not run: TestMain is the
// test binary's.)
func ExampleChildMain() {
	testMain := func(m *testing.M) {
		connectortest.ChildMain(childRabbit())
		goleak.VerifyTestMain(m)
	}
	_ = testMain
}
