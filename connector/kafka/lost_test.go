package kafka_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// TestLostPartitionsCommitNothing has the coordinator answer a
// heartbeat with UNKNOWN_MEMBER_ID while offsets 0, 1, 3 and 4 are
// settled and not committed and offset 2 is held: the member's partition
// is lost, not revoked, and nothing of it is committed, so when the member
// rejoins it reads every record again. Offset 2's late settle commits
// nothing either; what the new membership settles is committed.
func TestLostPartitionsCommitNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 5)...)
	cfg := a.config(topic)
	// No commit but a revoke's, a drain's and Close's: the clock never
	// moves, and CommitEvery is out of reach.
	cfg.Clock, cfg.CommitEvery = clockwork.NewFakeClock(), 1000
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	kafka.AddClientOpts(src, kgo.HeartbeatInterval(50*time.Millisecond))

	var (
		mu      sync.Mutex
		handled []int64
	)
	release := make(chan struct{})
	var holding atomic.Bool
	b := pipeline.New("lost")
	var p *pipeline.Pipeline
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(ctx context.Context, m kafka.Message) error {
		if m.Offset == 2 && holding.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		handled = append(handled, m.Offset)
		n := len(handled)
		mu.Unlock()
		if n == 10 { // 0, 1, 3, 4, then 0–4 again, and the held 2
			p.Drain()
		}
		return nil
	}, pipeline.Parallel(4), pipeline.Unordered())
	p, err = b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	waitFor(t, "0, 1, 3 and 4 handled, 2 held", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 4 && holding.Load()
	})
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := kmsg.NewPtrHeartbeatResponse()
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	waitFor(t, "the records read again after the loss", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 9
	})
	assert.Empty(t, a.committed(topic, topic), "the lost partition committed nothing")
	close(release)
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	got := slices.Clone(handled)
	slices.Sort(got)
	assert.Equal(t, []int64{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, got, "every record twice: nothing was committed when the partition was lost")
	assert.Equal(t, map[int32]int64{0: 5}, a.committed(topic, topic))
}
