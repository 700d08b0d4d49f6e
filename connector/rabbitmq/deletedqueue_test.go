package rabbitmq_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// The queue deleted in the middle of a run: the broker cancels the
// consumer (transient), node restart opens the source again, and each
// Open meets the broker's 404, permanent; node restart, which restarts on
// any failure of the node, opens it again up to MaxRestarts (5 here), and
// the run then fails naming the 404, without hanging. docs/rabbitmq.md
// said no layer repeats a permanent refusal of Open (a review's finding:
// the doc now says node restart does).
func TestQueueDeletedMidRunFailsAfterTheRestarts(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	a.publish(q, ids(10)...)
	src := newSource(t, rabbitmq.SourceConfig{URL: a.url, Queue: q, Prefetch: 20})
	var once sync.Once
	sink := node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error {
		once.Do(func() {
			_, err := a.channel().QueueDelete(q, false, false, false)
			assert.NoError(t, err)
		})
		return nil
	})
	ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
	defer cancel()
	rec := &pipelinetest.Recorder{}
	_, err := consumePipeline(t, src, sink, pipeline.WithObserver(rec)).Run(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "the run hung")
	assert.Contains(t, err.Error(), "NOT_FOUND")
	refused := 0
	for _, ev := range pipelinetest.Of[observer.RetryEvent](rec) {
		require.Equal(t, resilience.NodeRestart, ev.Kind)
		if strings.Contains(ev.Err.Error(), "NOT_FOUND") {
			refused++
			assert.False(t, resilience.IsTransient(ev.Err), "the 404 is permanent: %v", ev.Err)
		}
	}
	// The first restart follows the cancelled consumer; the next four
	// follow an Open refused with 404; the sixth failure ends the run.
	assert.Equal(t, 4, refused)
}
