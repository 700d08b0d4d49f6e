package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/internal/servicetest"
)

func TestMain(m *testing.M) {
	// The consumer process of the suite's SIGKILL case is this binary.
	connectortest.ChildMain(childHarness())
	goleak.VerifyTestMain(m)
}

// testTimeout guards every wait of a test against the broker: each test
// waits on events, and this deadline only turns a hang into a failure.
const testTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName returns a name for the test's queues and exchanges: the
// test's name and a random suffix, so that runs never share a queue.
func uniqueName(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "sluice-test." + name + "." + hex.EncodeToString(b[:])
}

// An admin is a plain connection the tests use to set up, inspect and
// clean up the broker, independently of the code under test.
type admin struct {
	t    *testing.T
	url  string
	conn *amqp.Connection

	mu        sync.Mutex
	queues    []string
	exchanges []string
}

// newAdmin connects to the broker, or skips the test when there is none.
// At the end of the test it deletes everything the test registered.
func newAdmin(t *testing.T) *admin {
	t.Helper()
	url := servicetest.RabbitMQ(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	a := &admin{t: t, url: url, conn: conn}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err == nil {
			a.mu.Lock()
			for _, q := range a.queues {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			for _, ex := range a.exchanges {
				_ = ch.ExchangeDelete(ex, false, false)
			}
			a.mu.Unlock()
		}
		_ = conn.Close()
	})
	return a
}

// cleanup registers queues and exchanges to delete when the test ends.
func (a *admin) cleanup(queues []string, exchanges ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queues = append(a.queues, queues...)
	a.exchanges = append(a.exchanges, exchanges...)
}

// cleanupTopology registers a queue and its retry topology, with the
// tiers named by tiers (such as "10s").
func (a *admin) cleanupTopology(q string, tiers ...string) {
	queues := []string{q, q + "_retry"}
	for _, t := range tiers {
		queues = append(queues, q+"_retry_"+t)
	}
	a.cleanup(queues, q+"_dlx", q+"_retry")
}

// channel opens a channel that closes with the test. A channel the broker
// closes over an error is useless afterwards, so checks that expect one
// take a fresh channel each.
func (a *admin) channel() *amqp.Channel {
	a.t.Helper()
	ch, err := a.conn.Channel()
	require.NoError(a.t, err)
	a.t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// declareQueue declares a non-durable queue and registers it for cleanup.
func (a *admin) declareQueue(q string, args amqp.Table) {
	a.t.Helper()
	_, err := a.channel().QueueDeclare(q, false, false, false, false, args)
	require.NoError(a.t, err)
	a.cleanup([]string{q})
}

// depth returns the ready messages and the consumers of q, with a passive
// declare.
func (a *admin) depth(q string) (messages, consumers int) {
	a.t.Helper()
	info, err := a.channel().QueueDeclarePassive(q, false, false, false, false, nil)
	require.NoError(a.t, err)
	return info.Messages, info.Consumers
}

// publish sends bodies to q through the default exchange, with confirms,
// and waits until the broker has them all.
func (a *admin) publish(q string, bodies ...string) {
	a.t.Helper()
	ch := a.channel()
	require.NoError(a.t, ch.Confirm(false))
	var dcs []*amqp.DeferredConfirmation
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{Body: []byte(b), MessageId: b})
		require.NoError(a.t, err)
		dcs = append(dcs, dc)
	}
	ctx := testContext(a.t)
	for _, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		require.NoError(a.t, err)
		require.True(a.t, ok, "publish nacked")
	}
}

// ids returns n message bodies, "m-00000" and on.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m-%05d", i)
	}
	return out
}
