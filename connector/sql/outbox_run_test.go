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
func runOutbox(ctx context.Context, src *sluicesql.Outbox[outboxEvent], e *trackEmitter) <-chan error {
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
// Run fails with the delete's error, a Run after it emits none of the
// settled rows again and deletes them.
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

	// Run fails once a delete failed, maybe before it emitted every row.
	ran := runOutbox(ctx, src, e)
	settled := 0
	for err == nil {
		select {
		case done := <-e.dones:
			done(node.Delivered)
			settled++
		case err = <-ran:
		}
	}
	require.ErrorIs(t, err, sluicesql.ErrOutbox)
	var oe *sluicesql.OutboxError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "delete", oe.Op)
	assert.ErrorContains(t, err, "deletes refused")
	assert.Equal(t, want, outboxKeys(t, db, table, ""), "the rows stay")

	_, err = db.Exec("DROP TRIGGER refuse")
	require.NoError(t, err)
	ran = runOutbox(ctx, src, e)
	for ; settled < len(want); settled++ {
		(<-e.dones)(node.Delivered)
	}
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
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
