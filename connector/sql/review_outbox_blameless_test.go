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

// TestReviewOutboxFailedInRunEmittedTwice (finding 1): docs/sql-outbox.md
// says "Within a run nothing is emitted twice" and that a Failed row
// "stays: the next run emits it". Under OnItemFailure DeadLetter, a sink
// error marked blameless (idempotency.ErrInProgress is one: the sink the
// docs recommend behind an outbox) ends the item Failed while the run goes
// on; the outbox forgets the row and emits it again in the same run, at
// its next pass, and then deletes it.
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
		r.waitPoll(t)
		r.drain(t)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 1, calls[busy], "row %d emitted %d times in one run", busy, calls[busy])
	})
}
