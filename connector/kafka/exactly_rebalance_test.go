package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
)

// A second member joins the group mid-stream: the partitions are shared
// out between epochs, and a read_committed consumer of the output sees
// each input's output exactly once.
func TestExactlyOnceRebalance(t *testing.T) {
	t.Parallel()
	c := shared(t)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 4)
	createTopicOn(t, c, out, 4)
	const n = 400
	fillInputFrom(t, addrs, in, 0, n/2)
	a := newAdmin(t, c)

	type member struct {
		eo    *kafka.ExactlyOnce[kafka.Message]
		clock *clockwork.FakeClock
		res   chan error
		seen  atomic.Int64
	}
	start := func(name string) *member {
		m := &member{clock: clockwork.NewFakeClock(), res: make(chan error, 1)}
		m.eo = newEO(t, addrs, in, out, in, name, m.clock)
		p := eoPipeline(t, m.eo, m.clock, func(_ context.Context, msg kafka.Message) (kafka.Message, error) {
			m.seen.Add(1)
			return msg, nil
		})
		go func() {
			_, err := p.Run(pubContext(t))
			m.res <- err
		}()
		return m
	}
	first := start(in + "-a")
	var second *member
	members := func() []*member {
		if second == nil {
			return []*member{first}
		}
		return []*member{first, second}
	}
	ticks := 0
	filled := false
	require.Eventually(t, func() bool {
		for _, m := range members() {
			m.clock.Advance(time.Second)
		}
		ticks++
		if ticks%10 != 0 {
			return false
		}
		lag := lagOf(t, a, in, in)
		switch {
		case second == nil && lag < n/2*3/4:
			// Mid-stream: the second member joins.
			second = start(in + "-b")
		case second != nil && !filled && groupMembers(t, a, in) == 2:
			// The rest of the input comes once both share the topic.
			fillInputFrom(t, addrs, in, n/2, n)
			filled = true
		}
		return filled && lagOf(t, a, in, in) == 0
	}, pubTimeout, 5*time.Millisecond)
	for _, m := range members() {
		m.eo.Source().Stop()
	}
	for _, m := range members() {
		var err error
		require.Eventually(t, func() bool {
			m.clock.Advance(time.Second)
			select {
			case err = <-m.res:
				return true
			default:
				return false
			}
		}, pubTimeout, 5*time.Millisecond)
		require.NoError(t, err)
	}
	assert.Positive(t, second.seen.Load(), "the second member took partitions")
	assert.Positive(t, second.eo.Source().Commits())
	t.Logf("first member handled %d records, second %d", first.seen.Load(), second.seen.Load())
	checkOnce(t, readCommitted(t, addrs, out, n), n)
}

// groupMembers returns the members of group once it is stable, else 0.
func groupMembers(t testing.TB, a *admin, group string) int {
	t.Helper()
	gs, err := a.adm.DescribeGroups(pubContext(t), group)
	require.NoError(t, err)
	g, ok := gs[group]
	if !ok || g.State != "Stable" {
		return 0
	}
	return len(g.Members)
}
