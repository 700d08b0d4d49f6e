package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// holdRequests holds every request of key that c is sent until release
// (at the latest when the test ends); held receives once per request
// held.
func holdRequests(t *testing.T, c *kfake.Cluster, key kmsg.Key) (held <-chan struct{}, release func()) {
	t.Helper()
	gate := make(chan struct{})
	ch := make(chan struct{}, 64)
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case ch <- struct{}{}:
		default:
		}
		c.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	t.Cleanup(release)
	return ch, release
}

// closeSetup starts a cluster of the test's own with a topic of one
// partition holding three records, and returns a source config for it
// whose committer commits only when commitEvery records settled (its
// fake clock never moves), with closeTimeout.
func closeSetup(t *testing.T, commitEvery int, closeTimeout time.Duration) (*kfake.Cluster, *admin, string, kafka.SourceConfig) {
	t.Helper()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "a"), rec(0, "", "b"), rec(0, "", "c"))
	cfg := a.config(topic)
	cfg.Clock = clockwork.NewFakeClock()
	cfg.CommitEvery = commitEvery
	cfg.CloseTimeout = closeTimeout
	return c, a, topic, cfg
}

// openSource returns a source of cfg, opened.
func openSource(t *testing.T, cfg kafka.SourceConfig) *kafka.Source {
	t.Helper()
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	require.NoError(t, src.Open(testContext(t)))
	return src
}

// waitClientGone waits until no goroutine runs that did not run at
// before, but the cluster's: a client Close left to close in the
// background is gone once the broker answered.
func waitClientGone(t *testing.T, before goleak.Option) {
	t.Helper()
	// The cluster reads each of its connections on a goroutine of the
	// moment, the admin's included: not the source's.
	opts := []goleak.Option{before, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1")}
	waitWithin(t, 30*time.Second, func() bool { return goleak.Find(opts...) == nil },
		func() string {
			return fmt.Sprintf("the client still runs once the broker answered: %v", goleak.Find(opts...))
		})
}

// Close ends within CloseTimeout when the broker does not answer its last
// commit, a commit the committer sent before it, or the group's leave: the
// broker answers a connection's requests in turn, so the leave waits
// behind an unanswered commit, and the client waits for a request it
// wrote until the answer or its own request timeout (10 s; Close took
// that long before). The client then closes in the background, and is
// gone once the broker answers. A leave alone unanswered, after the last
// commit was, is no error.
func TestCloseTimeoutBoundsAnUnansweredRequest(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hold        kmsg.Key
		commitEvery int // 1: the committer commits each record; 1000: only Close commits
		commitFails bool
	}{
		{"committer-commit-held", kmsg.OffsetCommit, 1, true},
		{"last-commit-held", kmsg.OffsetCommit, 1000, true},
		{"leave-held", kmsg.LeaveGroup, 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, a, topic, cfg := closeSetup(t, tc.commitEvery, 200*time.Millisecond)
			before := goleak.IgnoreCurrent()
			src := openSource(t, cfg)
			held, release := holdRequests(t, c, tc.hold)
			require.NoError(t, src.Run(testContext(t), &countingEmitter{stop: src.Stop, n: 3}))
			if tc.commitEvery == 1 {
				select {
				case <-held:
				case <-time.After(10 * time.Second):
					t.Fatal("no commit reached the cluster within 10 s")
				}
			}
			closed := make(chan error, 1)
			go func() { closed <- src.Close(context.Background()) }()
			select {
			case err := <-closed:
				if tc.commitFails {
					require.ErrorIs(t, err, context.DeadlineExceeded, "the last commit was not answered")
					assert.Contains(t, err.Error(), "closes in the background")
				} else {
					require.NoError(t, err)
					select {
					case <-held:
					default:
						t.Fatal("the leave did not reach the cluster")
					}
					assert.Equal(t, map[int32]int64{0: 3}, a.committed(topic, topic), "the last commit was answered")
				}
			case <-time.After(3 * time.Second):
				t.Fatal("Close still waits 3 s (15 x CloseTimeout) after it began")
			}
			release()
			waitClientGone(t, before)
		})
	}
}

// countingEmitter settles each item at once and calls stop after n.
type countingEmitter struct {
	delivered
	mu   sync.Mutex
	seen int
	n    int
	stop func()
}

func (e *countingEmitter) EmitTracked(ctx context.Context, m kafka.Message, done func(o node.Outcome)) error {
	e.mu.Lock()
	e.seen++
	last := e.seen == e.n
	e.mu.Unlock()
	done(node.Delivered)
	if last {
		e.stop()
	}
	return nil
}

// When the broker answers Close's commit only after CloseTimeout (here with
// a refusal), the revoke of the group's leave, within a CloseTimeout of its
// own, commits again once the late answer came: the offsets are
// committed, and Close returns nil, as nothing is left uncommitted.
func TestCloseLateCommitAnswerCommitsAtLeave(t *testing.T) {
	c, a, topic, cfg := closeSetup(t, 1000, 2*time.Second)
	src := openSource(t, cfg)
	// The first commit is held, then refused: only a later commit can
	// commit the offsets.
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { <-gate })
		return refuseAll(req.(*kmsg.OffsetCommitRequest)), nil, true
	})
	require.NoError(t, src.Run(testContext(t), &countingEmitter{stop: src.Stop, n: 3}))
	closed := make(chan error, 1)
	go func() { closed <- src.Close(context.Background()) }()
	// The broker answers between the two CloseTimeouts.
	late := time.AfterFunc(3*time.Second, release)
	defer late.Stop()
	select {
	case err := <-closed:
		require.NoError(t, err, "Close's own commit timed out, and the leave's took what it held")
	case <-time.After(20 * time.Second):
		t.Fatal("Close still waits 20 s after it began (CloseTimeout 2 s)")
	}
	assert.Equal(t, map[int32]int64{0: 3}, a.committed(topic, topic), "the leave's commit got through")
}
