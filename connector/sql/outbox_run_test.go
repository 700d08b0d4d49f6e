package sql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A trackEmitter is the emitter of an outbox run without a pipeline: it
// hands each item's done to the test through dones, after check.
type trackEmitter struct {
	t     *testing.T
	check func(emitted int)
	items []outboxEvent
	dones chan func(node.Outcome)
}

func (e *trackEmitter) Emit(context.Context, outboxEvent) error {
	e.t.Error("the outbox emitted an untracked item")
	return nil
}

func (e *trackEmitter) EmitAt(context.Context, outboxEvent, []byte) error {
	e.t.Error("the outbox emitted an item with a position")
	return nil
}

func (e *trackEmitter) EmitTracked(ctx context.Context, item outboxEvent, done func(node.Outcome)) error {
	e.items = append(e.items, item)
	if e.check != nil {
		e.check(len(e.items))
	}
	select {
	case e.dones <- done:
		return nil
	case <-ctx.Done():
		done(node.Failed)
		return ctx.Err()
	}
}

// runOutbox runs src with e until ctx ends, and returns what Run returned
// on the channel.
func runOutbox(ctx context.Context, src *sluicesql.OutboxSource[outboxEvent], e *trackEmitter) <-chan error {
	ran := make(chan error, 1)
	go func() { ran <- src.Run(ctx, e) }()
	return ran
}

// TestOutboxMaxInFlight holds the items' outcomes back: the outbox never
// has more than MaxInFlight rows emitted and not yet deleted, and goes on
// as they settle.
func TestOutboxMaxInFlight(t *testing.T) {
	const n, max = 30, 7
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		want := outboxInsert(t, db, d, table, "order.created", n)
		clock := clockwork.NewFakeClock()
		src := newOutbox(t, db, d, table, clock, func(o *sluicesql.OutboxOptions) { o.MaxInFlight = max; o.PageSize = 5; o.DeleteBatch = 3 })
		e := &trackEmitter{t: t, dones: make(chan func(node.Outcome)), check: func(emitted int) {
			deleted := n - len(outboxKeys(t, db, table, ""))
			assert.LessOrEqual(t, emitted-deleted, max, "rows emitted and not deleted")
		}}
		ctx, cancel := context.WithCancel(outboxContext(t))
		ran := runOutbox(ctx, src, e)

		// The outbox stops at max rows held; the test settles them then.
		var held []func(node.Outcome)
		for got := 0; got < n; got++ {
			select {
			case done := <-e.dones:
				held = append(held, done)
			case err := <-ran:
				t.Fatalf("Run returned after %d items: %v", got, err)
			}
			if len(held) == max || got == n-1 {
				for _, done := range held {
					done(node.Delivered)
				}
				held = nil
			}
		}
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
		cancel()
		require.ErrorIs(t, <-ran, context.Canceled)
		require.NoError(t, src.Close(context.Background()))
		assert.Equal(t, want, outboxIDs(e.items))
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}

// TestOutboxDeleteFails makes the delete fail (a trigger refuses it):
// once the deleter tried it again three times, Run fails with the
// delete's error; a Run after it emits none of the settled rows again and
// deletes them.
func TestOutboxDeleteFails(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	want := outboxInsert(t, db, d, table, "order.created", 12)
	_, err := db.Exec("CREATE TRIGGER refuse BEFORE DELETE ON " + table + " BEGIN SELECT RAISE(ABORT, 'deletes refused'); END")
	require.NoError(t, err)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, table, clock, func(o *sluicesql.OutboxOptions) { o.PageSize = 5 })
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	defer cancel()

	// Run fails once a delete failed four times, maybe before it emitted
	// every row. The clock moves whenever something waits on it.
	ran := runOutbox(ctx, src, e)
	tick, stop := context.WithCancel(ctx)
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for clock.BlockUntilContext(tick, 1) == nil {
			clock.Advance(outboxPoll)
		}
	}()
	settled := 0
	for err == nil {
		select {
		case done := <-e.dones:
			done(node.Delivered)
			settled++
		case err = <-ran:
		}
	}
	stop()
	<-ticked
	require.ErrorIs(t, err, sluicesql.ErrOutbox)
	var oe *sluicesql.OutboxError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "delete", oe.Op)
	assert.ErrorContains(t, err, "deletes refused")
	attempts, ok := resilience.RetriedAttempts(err)
	assert.True(t, ok, "the error says the outbox tried again")
	assert.Equal(t, 4, attempts)
	assert.Equal(t, want, outboxKeys(t, db, table, ""), "the rows stay")

	_, err = db.Exec("DROP TRIGGER refuse")
	require.NoError(t, err)
	ran = runOutbox(ctx, src, e)
	for ; settled < len(want); settled++ {
		(<-e.dones)(node.Delivered)
	}
	// The waiter may be the second Run's poll or the deleter's retry that
	// the first Run left on the clock (nobody moves the clock now): either
	// way, nothing more is emitted until the clock moves, and Close
	// deletes what settled.
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox waits on the clock")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	require.NoError(t, src.Close(context.Background()))
	assert.Equal(t, want, outboxIDs(e.items), "no row emitted twice")
	assert.Empty(t, outboxKeys(t, db, table, ""))
}

// TestOutboxCloseLeaves shows a Close whose delete fails returns the error
// and leaves the rows, which a next run emits again.
func TestOutboxCloseLeaves(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	want := outboxInsert(t, db, d, table, "order.created", 3)
	clock := clockwork.NewFakeClock()
	src := newOutbox(t, db, d, table, clock)
	e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel := context.WithCancel(outboxContext(t))
	ran := runOutbox(ctx, src, e)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	_, err := db.Exec("CREATE TRIGGER refuse BEFORE DELETE ON " + table + " BEGIN SELECT RAISE(ABORT, 'deletes refused'); END")
	require.NoError(t, err)
	for range 3 {
		(<-e.dones)(node.Delivered)
	}
	err = src.Close(context.Background())
	require.ErrorIs(t, err, sluicesql.ErrOutbox)
	assert.Equal(t, want, outboxKeys(t, db, table, ""), "the rows stay")

	_, err = db.Exec("DROP TRIGGER refuse")
	require.NoError(t, err)
	clock = clockwork.NewFakeClock()
	next := newOutbox(t, db, d, table, clock)
	again := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
	ctx, cancel = context.WithCancel(outboxContext(t))
	ran = runOutbox(ctx, next, again)
	for range 3 {
		(<-again.dones)(node.Delivered)
	}
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	require.NoError(t, next.Close(context.Background()))
	assert.Equal(t, want, outboxIDs(again.items), "the next run emits the rows again")
	assert.Empty(t, outboxKeys(t, db, table, ""))
}

// TestOutboxOutcomes settles one row with each outcome: Delivered,
// Filtered, Skipped and DeadLettered rows are deleted; Failed, Rejected
// and HandedOff rows stay, and the next Run emits them again.
func TestOutboxOutcomes(t *testing.T) {
	outcomes := []node.Outcome{node.Delivered, node.Filtered, node.Skipped, node.DeadLettered, node.Failed, node.Rejected, node.HandedOff}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		all := outboxInsert(t, db, d, table, "order.created", len(outcomes))
		clock := clockwork.NewFakeClock()
		src := newOutbox(t, db, d, table, clock)
		e := &trackEmitter{t: t, dones: make(chan func(node.Outcome), 100)}
		ctx, cancel := context.WithCancel(outboxContext(t))
		ran := runOutbox(ctx, src, e)
		for _, o := range outcomes {
			(<-e.dones)(o)
		}
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
		cancel()
		require.ErrorIs(t, <-ran, context.Canceled)
		require.NoError(t, src.Close(context.Background()))
		left := all[4:]
		assert.Equal(t, left, outboxKeys(t, db, table, ""), "failed, rejected and handed-off rows stay")

		// The same outbox, run again (the pipeline's next run).
		ctx, cancel = context.WithCancel(outboxContext(t))
		ran = runOutbox(ctx, src, e)
		for range left {
			(<-e.dones)(node.Delivered)
		}
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
		cancel()
		require.ErrorIs(t, <-ran, context.Canceled)
		require.NoError(t, src.Close(context.Background()))
		assert.Equal(t, append(all[:len(all):len(all)], left...), outboxIDs(e.items))
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}

// outboxInsertAt adds a row with key k, as a transaction that took its
// key before others and committed after them would.
func outboxInsertAt(t *testing.T, db *sql.DB, d sluicesql.Dialect, table string, k int64) {
	t.Helper()
	_, err := db.Exec("INSERT INTO "+table+" (id, topic, payload) VALUES ("+outboxPH(d, 1)+", 'late', 'committed late')", k)
	require.NoError(t, err)
}

// TestOutboxLateCommit shows a row whose key is below one already read
// is emitted at the next poll.
func TestOutboxLateCommit(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		outboxInsertAt(t, db, d, table, 10)
		outboxInsertAt(t, db, d, table, 11)
		clock := clockwork.NewFakeClock()
		r := startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock), nil)
		first := r.receive(t, 2)
		r.waitPoll(t)
		outboxInsertAt(t, db, d, table, 5)
		clock.Advance(outboxPoll)
		late := r.receive(t, 1)
		r.waitPoll(t)
		assert.Empty(t, r.drain(t))
		assert.Equal(t, []int64{10, 11, 5}, outboxIDs(append(first, late...)))
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}

// TestOutboxLateCommitUnderLoad shows the same while the table never
// drains: once PollInterval passed, the outbox reads from the start again
// after a full page.
func TestOutboxLateCommitUnderLoad(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		for k := int64(1001); k <= 1030; k++ {
			outboxInsertAt(t, db, d, table, k)
		}
		clock := clockwork.NewFakeClock()
		src := newOutbox(t, db, d, table, clock, func(o *sluicesql.OutboxOptions) { o.PageSize = 10 })
		e := &trackEmitter{t: t, dones: make(chan func(node.Outcome))}
		ctx, cancel := context.WithCancel(outboxContext(t))
		ran := runOutbox(ctx, src, e)
		for range 9 {
			(<-e.dones)(node.Delivered)
		}
		// Run is emitting the last row of the first page.
		outboxInsertAt(t, db, d, table, 500)
		clock.Advance(outboxPoll)
		for range 22 {
			(<-e.dones)(node.Delivered)
		}
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
		cancel()
		require.ErrorIs(t, <-ran, context.Canceled)
		require.NoError(t, src.Close(context.Background()))
		want := []int64{}
		for k := int64(1001); k <= 1010; k++ {
			want = append(want, k)
		}
		want = append(want, 500)
		for k := int64(1011); k <= 1030; k++ {
			want = append(want, k)
		}
		assert.Equal(t, want, outboxIDs(e.items))
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}
