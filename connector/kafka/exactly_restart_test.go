package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// countingSink keeps the error of each Write of a TransactSink[string],
// by item.
type countingSink struct {
	inner *kafka.TransactSink[string]
	mu    sync.Mutex
	errs  map[string][]error
}

func (s *countingSink) Write(ctx context.Context, v string) error {
	err := s.inner.Write(ctx, v)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[v] = append(s.errs[v], err)
	return err
}

func (s *countingSink) writes(v string) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs[v]...)
}

// When the sink's items are not the Messages themselves, a Write cannot
// tell which epoch its record came from; after a source restart
// (NodeRestart: Close, Open, Run again) the new session therefore begins
// no transaction while an item of the epoch Close aborted is in flight.
// The held item's Write then comes with no transaction open: it is not
// produced and returns nil (its epoch was aborted, its record is read
// again); the new session begins, reads every record again, and a
// read_committed consumer sees each output once; the run ends without
// error.
func TestExactlyOnceRestartWaitsForEndedEpoch(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	const n = 10
	fillInput(t, addrs, in, n)
	var armed atomic.Bool
	failNextFetch(c, in, &armed)
	clock := clockwork.NewFakeClock()
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[string]{Brokers: addrs, Topic: in, Group: in,
		TransactionalID: in + "-txn", Output: out, Clock: clock, CommitInterval: time.Second, MaxInFlight: 32,
		Record: func(v string) (*kgo.Record, error) { return &kgo.Record{Value: []byte(v)}, nil }})
	require.NoError(t, err)
	src := eo.Source()

	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	deliveries := map[string][]int{}
	held := make(chan struct{})
	apply := func(ctx context.Context, m kafka.Message) (string, error) {
		v := string(m.Value)
		mu.Lock()
		seen[v]++
		deliveries[v] = append(deliveries[v], m.Deliveries)
		first := v == "v0" && seen[v] == 1
		mu.Unlock()
		if first {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}
		return "out-" + v, nil
	}
	seenOf := func(v string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[v]
	}
	snk := &countingSink{inner: eo.Sink(), errs: map[string][]error{}}
	b := pipeline.New("exactly-restart-wait", pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
	s := pipeline.Source(b, "in", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 1, Backoff: resilience.Constant(time.Second), MaxReplayWindow: 100}
	}))
	m := pipeline.Map(b, "apply", s, apply, pipeline.Parallel(4), pipeline.Unordered())
	pipeline.Sink(b, "out", m, snk, pipeline.Parallel(4))
	p, err := b.Build()
	require.NoError(t, err)

	res := make(chan error, 1)
	go func() {
		_, err := p.Run(pubContext(t))
		res <- err
	}()
	<-held
	waitFor(t, "the other outputs of epoch 1 written", func() bool {
		for i := 1; i < n; i++ {
			if len(snk.writes(fmt.Sprintf("out-v%d", i))) == 0 {
				return false
			}
		}
		return true
	})
	armed.Store(true)
	fillInputFrom(t, addrs, in, n, n+1)
	waitFor(t, "the restart's Close aborted epoch 1", func() bool { return src.Aborts() >= 1 })
	// While v0 of the aborted epoch is held, the new session reads
	// nothing: no record is seen twice, nothing is committed. (Proving
	// that nothing happens needs a window of real time: the cluster
	// answers joins and fetches in real time; without the wait, the new
	// session reads again and commits well within it.)
	assert.Never(t, func() bool {
		clock.Advance(time.Second)
		return seenOf("v1") > 1 || src.Commits() > 0
	}, 3*time.Second, 10*time.Millisecond, "a new epoch began while an item of the aborted one was in flight")
	t.Logf("before release: seen v1 %d, commits %d, aborts %d", seenOf("v1"), src.Commits(), src.Aborts())
	close(release)
	waitFor(t, "the old v0 written", func() bool { return len(snk.writes("out-v0")) >= 1 })
	assert.NoError(t, snk.writes("out-v0")[0], "the stale output is dropped, not failed")
	waitFor(t, "the new session read everything again and committed", func() bool {
		clock.Advance(time.Second)
		return seenOf("v0") >= 2 && seenOf(fmt.Sprintf("v%d", n)) >= 1 && src.Commits() >= 1 &&
			len(snk.writes(fmt.Sprintf("out-v%d", n))) >= 1
	})
	commits := src.Commits()
	waitFor(t, "an epoch committed after it", func() bool {
		clock.Advance(time.Second)
		return src.Commits() > commits
	})
	src.Stop()
	var runErr error
	waitFor(t, "the run ended", func() bool {
		select {
		case runErr = <-res:
			return true
		default:
			clock.Advance(time.Second)
			return false
		}
	})
	t.Logf("v0 writes %v; run %v", snk.writes("out-v0"), runErr)
	require.NoError(t, runErr)
	mu.Lock()
	assert.Equal(t, []int{1, 2}, deliveries["v0"][:2], "v0 read again after the abort is its 2nd delivery")
	assert.Equal(t, 1, deliveries[fmt.Sprintf("v%d", n)][0], "a record read first after the restart is its 1st")
	mu.Unlock()
	recs := readCommitted(t, addrs, out, n+1)
	count := map[string]int{}
	for _, r := range recs {
		count[strings.TrimPrefix(string(r.Value), "out-")]++
	}
	for i := 0; i <= n; i++ {
		assert.Equal(t, 1, count[fmt.Sprintf("v%d", i)], "v%d's output committed once", i)
	}
}
