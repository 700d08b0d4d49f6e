package sql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// TestReviewOutboxMaxInFlightBelowBatch (finding 4): MaxInFlight counts
// rows until their items settle; a Batch downstream whose size is above
// MaxInFlight (linger 0: "waits for a full batch") never fills, and the
// outbox never emits more: the pipeline stalls for good with rows in the
// table, nothing written.
//
// The outbox cannot tell a batch that waits for rows it holds back from
// a slow sink, and must not emit past MaxInFlight: the rule is now in
// OutboxOptions.MaxInFlight's doc and docs/sql.md (MaxInFlight at least
// the largest batch downstream). The test shows that rule: MaxInFlight 10
// under a batch of 10 publishes every row.
func TestReviewOutboxMaxInFlightBelowBatch(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	outboxInsert(t, db, d, table, "order.created", 20)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, table, clock, func(o *sluicesql.OutboxOptions) { o.MaxInFlight = 10 })
	wrote := make(chan int, 10)
	b := pipeline.New("publish", pipeline.WithClock(clock))
	batches := pipeline.Batch(b, "batch", pipeline.Source(b, "outbox", node.Source[outboxEvent](src)), 10, 0)
	pipeline.Sink(b, "broker", batches, node.SinkFunc[[]outboxEvent](func(_ context.Context, es []outboxEvent) error {
		wrote <- len(es)
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(outboxContext(t))
	ran := make(chan error, 1)
	go func() { _, err := p.Run(ctx); ran <- err }()
	defer func() { cancel(); <-ran }()

	n := 0
	stalled := time.NewTimer(2 * time.Second) // a hang detector, not a wait the test needs
	defer stalled.Stop()
	for n < 20 {
		select {
		case k := <-wrote:
			n += k
		case <-stalled.C:
			assert.Fail(t, "the pipeline stalled", "%d of 20 rows written in 2 s; the outbox holds MaxInFlight 10 rows, the batch waits for 10", n)
			return
		}
	}
}
