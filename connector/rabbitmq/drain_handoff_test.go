package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A drain with items parked on a Parallel node returns with the
// pipeline's clock standing still: the parked messages go to the retry
// queue at once, each with the story of a hand-off, and every other
// message is stored and acked. Stored and handed off make up what was
// published, each message once: nothing lost, nothing duplicated.
func TestDrainHandsParkedMessagesToTheRetryQueue(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"unordered", []pipeline.NodeOption{pipeline.Parallel(4), pipeline.Unordered()}},
		{"ordered", []pipeline.NodeOption{pipeline.Parallel(4)}},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			ctx := testContext(t)
			q := uniqueName(t)
			a.cleanupTopology(q, "1h")
			src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
				URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, Prefetch: 32,
				Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 2,
					Delays: []time.Duration{time.Hour}, HandOffAfter: 30 * time.Minute},
			})
			require.NoError(t, err)
			require.NoError(t, src.Open(ctx))
			require.NoError(t, src.Close(ctx))
			const n = 20
			var bodies []string
			for i := range n {
				bodies = append(bodies, fmt.Sprintf("m%02d", i))
			}
			a.publish(q, bodies...)
			waiting := map[string]bool{"m03": true, "m07": true}

			clock := clockwork.NewFakeClock()
			var (
				mu     sync.Mutex
				calls  = map[string]int{}
				stored []string
				first  int
			)
			allCalled := make(chan struct{})
			handle := node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
				mu.Lock()
				defer mu.Unlock()
				b := string(m.Body)
				if calls[b]++; calls[b] == 1 {
					if first++; first == n {
						close(allCalled)
					}
					if waiting[b] {
						// Ten minutes: under HandOffAfter, so it parks.
						return m, resilience.RetryAfter(errFlaky, 10*time.Minute)
					}
				}
				return m, nil
			})
			b := pipeline.New("drain-handoff", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 5 }))
			h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src), handle, v.opts...)
			pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
				mu.Lock()
				stored = append(stored, string(m.Body))
				mu.Unlock()
				return nil
			}))
			p, err := b.Build()
			require.NoError(t, err)
			type outcome struct {
				res pipeline.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := p.Run(ctx)
				done <- outcome{res, err}
			}()
			select {
			case <-allCalled:
			case <-ctx.Done():
				t.Fatal("not every message was called")
			}
			require.NoError(t, clock.BlockUntilContext(ctx, len(waiting)), "the two messages park")
			start := clock.Now()
			require.True(t, p.Drain())
			var out outcome
			select {
			case out = <-done:
			case <-ctx.Done():
				t.Fatal("the drain did not return with the pipeline's clock standing still")
			}
			require.NoError(t, out.err)
			assert.Equal(t, start, clock.Now())
			handled, ok := out.res.Node("handle")
			require.True(t, ok)
			assert.Equal(t, int64(len(waiting)), handled.HandedOff)

			mu.Lock()
			got := slices.Clone(stored)
			mu.Unlock()
			slices.Sort(got)
			var others []string
			for _, body := range bodies {
				if !waiting[body] {
					others = append(others, body)
				}
			}
			assert.Equal(t, others, got, "every other message stored once")
			ready, _ := a.depth(q)
			assert.Zero(t, ready, "every message left the queue: stored and acked, or handed off")

			// The retry queue holds the two parked messages, once each,
			// with where their retries stand.
			tier := q + "_retry_1h"
			ch := a.channel()
			var back []string
			for {
				d, ok, err := ch.Get(tier, true)
				require.NoError(t, err)
				if !ok {
					break
				}
				back = append(back, string(d.Body))
				assert.Equal(t, "handle", d.Headers[rabbitmq.HeaderHandOffNode])
				assert.Equal(t, int64(1), d.Headers[rabbitmq.HeaderHandOffRetry])
				assert.Equal(t, int64(1), d.Headers[rabbitmq.HeaderAttempts])
			}
			slices.Sort(back)
			assert.Equal(t, []string{"m03", "m07"}, back)
		})
	}
}
