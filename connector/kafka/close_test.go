package kafka_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// delivered is an emitter that settles every item at once.
type delivered struct{}

func (delivered) Emit(context.Context, kafka.Message) error { return nil }
func (delivered) EmitTracked(_ context.Context, _ kafka.Message, done func(node.Outcome)) error {
	done(node.Delivered)
	return nil
}
func (delivered) EmitAt(context.Context, kafka.Message, []byte) error { return nil }

var _ node.Emitter[kafka.Message] = delivered{}

// A Run called again on an open source rejoins the group with a new
// client; when that client cannot reach the cluster, Run returns the
// error and leaves the source with no session. Close must still close the
// copies' producer (a franz-go client, with Retry or MaxDeliveries) and
// the crash ledger: nothing of the source is left running.
func TestCloseAfterFailedRejoinClosesGuard(t *testing.T) {
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	var refuse atomic.Bool
	cfg := a.config(topic)
	cfg.DialTimeout = time.Second
	cfg.Retry = kafka.RetryTopics{Enabled: true, Declare: true, Delays: []time.Duration{time.Minute}}
	cfg.Dial = func(ctx context.Context, network, host string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("refused by the test")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, host)
	}
	before := goleak.IgnoreCurrent()
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	require.NoError(t, src.Open(testContext(t)))

	ended, cancel := context.WithCancel(testContext(t))
	cancel()
	require.ErrorIs(t, src.Run(ended, delivered{}), context.Canceled) // the first run
	refuse.Store(true)
	require.Error(t, src.Run(testContext(t), delivered{}), "the rejoin cannot reach the cluster")
	require.NoError(t, src.Close(context.Background()))

	assert.NoError(t, goleak.Find(before), "Close leaves nothing of the source running")
}
