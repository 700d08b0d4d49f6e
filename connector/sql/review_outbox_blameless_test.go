package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// TestReviewOutboxFailedInRunEmittedTwice (finding 1): under
// OnItemFailure DeadLetter, a sink error marked blameless
// (idempotency.ErrInProgress is one: the sink the docs recommend behind
// an outbox) ends the item Failed while the run goes on. The review
// expected one call; the engine's contract for a blameless failure is
// that the source delivers the item again, so the outbox emits the row
// again in the same run, at its next pass once PollInterval passed, and
// deletes it once delivered: two calls, and the docs now say so
// (TestOutboxFailedWaits shows the wait).
func TestReviewOutboxFailedInRunEmittedTwice(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		all := outboxInsert(t, db, d, table, "order.created", 5)
		busy := all[2]
		var mu sync.Mutex
		calls := map[int64]int{}
		clock := clockwork.NewFakeClock()
		r := startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock),
			func(_ context.Context, e outboxEvent) error {
				mu.Lock()
				defer mu.Unlock()
				calls[e.ID]++
				if e.ID == busy && calls[e.ID] == 1 {
					return resilience.MarkBlameless(errors.New("store: key claimed by another owner"))
				}
				return nil
			},
			pipeline.WithDeadLetter(deadletter.NewMemory(10)),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
			}))
		r.receive(t, 4)
		r.waitPoll(t)
		clock.Advance(outboxPoll) // the next pass, same run
		again := r.receive(t, 1)
		r.waitPoll(t)
		assert.Empty(t, r.drain(t))
		assert.Equal(t, []int64{busy}, outboxIDs(again))
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 2, calls[busy], "row %d emitted again once", busy)
		assert.Empty(t, outboxKeys(t, db, table, ""), "every row deleted, the busy one once delivered")
	})
}
