package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/kafka"
)

// TransactSource.Close ends within two CloseTimeouts when the broker does
// not answer the transaction's end (EndTxn) or the group's leave: the
// broker answers a connection's requests in turn, so the leave waits
// behind an unanswered end, and the client waits for a request it wrote
// until the answer or its own request timeout (Close took that long
// before). The client then closes in the background, and is gone once
// the broker answers. An end unanswered is an unknown outcome; a leave
// alone unanswered, after the end was answered, is no error.
func TestExactlyOnceCloseTimeoutBoundsAnUnansweredRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hold     kmsg.Key
		endFails bool
	}{
		{"end-held", kmsg.EndTxn, true},
		{"leave-held", kmsg.LeaveGroup, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, eo := eoCloseSetup(t)
			before := goleak.IgnoreCurrent()
			src := eo.Source()
			require.NoError(t, src.Open(testContext(t)))
			held, release := holdRequests(t, c, tc.hold)
			require.NoError(t, src.Run(testContext(t), &countingEmitter{stop: src.Stop, n: 3}))
			closed := make(chan error, 1)
			go func() { closed <- src.Close(context.Background()) }()
			select {
			case err := <-closed:
				if tc.endFails {
					require.ErrorIs(t, err, kafka.ErrOutcomeUnknown, "the end was not answered")
					assert.Contains(t, err.Error(), "closes in the background")
				} else {
					require.NoError(t, err)
					select {
					case <-held:
					default:
						t.Fatal("the leave did not reach the cluster")
					}
					assert.Equal(t, int64(1), src.Commits(), "the end was answered: the epoch committed")
				}
			case <-time.After(3 * time.Second):
				t.Fatal("Close still waits 3 s (15 x CloseTimeout) after it began")
			}
			release()
			waitClientGone(t, before)
		})
	}
}

// Opened twice without a Close, after a run cancelled mid-epoch (its polls
// block rebalances, and its epoch did not end): the second Open aborts the
// first session's epoch on that session, not on its own (which has no
// transaction), and closes the first client for good, so that nothing of
// it keeps running. (Found by review: the first client never closed, and
// Close ended the old epoch on the new session, calling it unknown.)
func TestExactlyOnceOpenTwiceClosesTheFirstClient(t *testing.T) {
	_, eo := eoCloseSetup(t)
	before := goleak.IgnoreCurrent()
	src := eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	ctx, cancel := context.WithCancel(testContext(t))
	t.Logf("first Run: %v", src.Run(ctx, &countingEmitter{stop: cancel, n: 3}))
	require.NoError(t, src.Open(testContext(t)))
	cerr := src.Close(context.Background())
	assert.NotErrorIs(t, cerr, kafka.ErrOutcomeUnknown, "the first session's epoch was ended on the second session")
	assert.Positive(t, src.Aborts(), "the cancelled run's epoch was aborted")
	waitClientGone(t, before)
}

// eoCloseSetup starts a cluster of the test's own with an input topic of
// one partition holding three records, and returns it with an ExactlyOnce
// of CloseTimeout 200 ms whose epoch stays open until Close (its fake
// clock never moves).
func eoCloseSetup(t *testing.T) (*kfake.Cluster, *kafka.ExactlyOnce[kafka.Message]) {
	t.Helper()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	fillInput(t, addrs, in, 3)
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: addrs, Topic: in, Group: in,
		TransactionalID: in + "-txn", Output: out, Record: echoRecord, Clock: clockwork.NewFakeClock(),
		CommitInterval: time.Hour, AckTimeout: time.Hour, MaxInFlight: 32, CloseTimeout: 200 * time.Millisecond,
		SessionTimeout: 6 * time.Second})
	require.NoError(t, err)
	return c, eo
}
