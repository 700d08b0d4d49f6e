package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// TestOutboxSizes reads tables of sizes around a page: every row reaches
// the sink once, in key order, and is deleted by the end of the run.
func TestOutboxSizes(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		for _, n := range []int{0, 1, 99, 100, 101, 250} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				table := outboxTable(t, db, d)
				want := outboxInsert(t, db, d, table, "order.created", n)
				clock := clockwork.NewFakeClock()
				r := startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock), nil)
				got := r.receive(t, n)
				r.waitPoll(t)
				assert.Empty(t, r.drain(t), "no row is emitted twice")
				assert.Equal(t, want, outboxIDs(got), "each row once, in key order")
				for _, e := range got {
					assert.Equal(t, "order.created", e.Topic)
					assert.Contains(t, e.Payload, "ünïcode ✓")
				}
				assert.Empty(t, outboxKeys(t, db, table, ""), "every row deleted")
			})
		}
	})
}

// TestOutboxPolls shows rows inserted while the outbox runs reach the sink
// at its next poll, once, and that rows settled but maybe not deleted yet
// when a poll reads the table again are not emitted again.
func TestOutboxPolls(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		want := outboxInsert(t, db, d, table, "before", 150)
		clock := clockwork.NewFakeClock()
		r := startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock), nil)
		got := r.receive(t, 150)
		r.waitPoll(t)

		for round := range 3 {
			later := outboxInsert(t, db, d, table, fmt.Sprint("during ", round), 30+round*50)
			want = append(want, later...)
			clock.Advance(outboxPoll)
			got = append(got, r.receive(t, len(later))...)
			r.waitPoll(t)
		}
		// A poll that finds nothing new emits nothing.
		clock.Advance(outboxPoll)
		r.waitPoll(t)
		assert.Empty(t, r.drain(t), "no row is emitted twice")
		assert.Equal(t, want, outboxIDs(got))
		assert.Empty(t, outboxKeys(t, db, table, ""), "every row deleted")
	})
}

// TestOutboxDeadLetterAndFilter shows rows whose items were dead-lettered
// or filtered out are settled too: deleted, and the dead letter holds the
// item.
func TestOutboxDeadLetterAndFilter(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		good := outboxInsert(t, db, d, table, "good", 5)
		poison := outboxInsert(t, db, d, table, "poison", 1)
		outboxInsert(t, db, d, table, "ignored", 2)
		good = append(good, outboxInsert(t, db, d, table, "good", 4)...)
		letters := deadletter.NewMemory(10)
		clock := clockwork.NewFakeClock()
		ctx := outboxContext(t)

		b := pipeline.New("outbox", pipeline.WithClock(clock), pipeline.WithDeadLetter(letters),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
			}))
		events := pipeline.Source(b, "outbox", node.Source[outboxEvent](newOutbox(t, db, d, table, clock)))
		kept := pipeline.Filter(b, "drop ignored", events, func(e outboxEvent) bool { return e.Topic != "ignored" })
		var stored []int64
		wrote := make(chan struct{}, 100)
		pipeline.Sink(b, "store", kept, node.SinkFunc[outboxEvent](func(_ context.Context, e outboxEvent) error {
			wrote <- struct{}{}
			if e.Topic == "poison" {
				return errors.New("store: the payload is not an order")
			}
			stored = append(stored, e.ID)
			return nil
		}))
		p, err := b.Build()
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := p.Run(ctx); done <- err }()
		for range 10 {
			<-wrote
		}
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		p.Drain()
		require.NoError(t, <-done)

		assert.Equal(t, good, stored)
		envs := letters.Envelopes()
		require.Len(t, envs, 1)
		assert.Equal(t, poison[0], envs[0].Item.(outboxEvent).ID)
		assert.Contains(t, envs[0].ErrText, "not an order")
		assert.Empty(t, outboxKeys(t, db, table, ""), "delivered, filtered and dead-lettered rows deleted")
	})
}

// TestOutboxCancelled cancels a run with rows in flight: the rows whose
// items were delivered are deleted, every other stays, and the next run
// (a new process) delivers exactly those.
func TestOutboxCancelled(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		all := outboxInsert(t, db, d, table, "order.created", 20)
		clock := clockwork.NewFakeClock()
		ctx, cancel := context.WithCancel(outboxContext(t))
		stuck := make(chan struct{})
		r := startOutbox(t, ctx, clock, newOutbox(t, db, d, table, clock), func(ctx context.Context, e outboxEvent) error {
			if e.ID == all[5] {
				close(stuck)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		first := r.receive(t, 5)
		<-stuck
		cancel()
		_, err := r.run.Wait()
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, all[:5], outboxIDs(first))
		assert.Equal(t, all[5:], outboxKeys(t, db, table, ""), "the rows not delivered stay, the others are deleted")

		clock = clockwork.NewFakeClock()
		r = startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock), nil)
		second := r.receive(t, 15)
		r.waitPoll(t)
		assert.Empty(t, r.drain(t))
		assert.Equal(t, all[5:], outboxIDs(second))
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}

// TestOutboxMarks marks settled rows instead of deleting them: the rows
// stay, marked, and a second run emits none of them.
func TestOutboxMarks(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		want := outboxInsert(t, db, d, table, "order.created", 120)
		mark := func(o *sluicesql.OutboxOptions) { o.MarkColumn = "published_at"; o.DeleteBatch = 7 }
		clock := clockwork.NewFakeClock()
		r := startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock, mark), nil)
		got := r.receive(t, 120)
		r.waitPoll(t)
		assert.Empty(t, r.drain(t))
		assert.Equal(t, want, outboxIDs(got))
		assert.Equal(t, want, outboxKeys(t, db, table, ""), "the rows stay")
		assert.Empty(t, outboxKeys(t, db, table, "WHERE published_at IS NULL"), "every row marked")

		more := outboxInsert(t, db, d, table, "order.paid", 3)
		clock = clockwork.NewFakeClock()
		r = startOutbox(t, outboxContext(t), clock, newOutbox(t, db, d, table, clock, mark), nil)
		assert.Equal(t, more, outboxIDs(r.receive(t, 3)), "a second run emits the unmarked rows only")
		r.waitPoll(t)
		assert.Empty(t, r.drain(t))
		assert.Empty(t, outboxKeys(t, db, table, "WHERE published_at IS NULL"))
	})
}

// restarts counts the node restarts of a run.
type restarts struct {
	observer.Nop
	n atomic.Int64
}

func (r *restarts) OnRetry(e observer.RetryEvent) {
	if e.Kind == resilience.NodeRestart {
		r.n.Add(1)
	}
}

// TestOutboxNodeRestart fails a read while every row is in flight (the
// table is renamed away): the source tries it again three times, then
// fails; it is restarted, reads the rows again, and emits none of them
// twice.
func TestOutboxNodeRestart(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		away := table + "_away"
		_, err := db.Exec("DROP TABLE IF EXISTS " + away)
		require.NoError(t, err)
		t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + away) })
		want := outboxInsert(t, db, d, table, "order.created", 10)
		clock := clockwork.NewFakeClock()
		ctx := outboxContext(t)
		release := make(chan struct{})
		obs := &restarts{}
		r := startOutbox(t, ctx, clock, newOutbox(t, db, d, table, clock, func(o *sluicesql.OutboxOptions) { o.PageSize = 4 }),
			func(ctx context.Context, e outboxEvent) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
			pipeline.WithObserver(obs),
			// Tracked items are handed over one at a time: the channel
			// holds every row while the sink holds the first.
			pipeline.WithHandOverBatch(1),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: 1, Backoff: resilience.Constant(time.Minute), MaxReplayWindow: 100}
			}))
		r.waitPoll(t) // every row emitted, none settled

		_, err = db.Exec("ALTER TABLE " + table + " RENAME TO " + away)
		require.NoError(t, err)
		clock.Advance(outboxPoll)
		for range 3 { // the source tries the read again itself, three times
			require.NoError(t, clock.BlockUntilContext(ctx, 1), "the source waits to read again")
			clock.Advance(outboxPoll)
		}
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the source waits to restart")
		_, err = db.Exec("ALTER TABLE " + away + " RENAME TO " + table)
		require.NoError(t, err)
		clock.Advance(time.Minute)
		r.waitPoll(t) // the restarted source read the rows in flight

		close(release)
		got := r.receive(t, 10)
		assert.Empty(t, r.drain(t), "no row emitted twice")
		assert.EqualValues(t, 1, obs.n.Load(), "the source was restarted")
		assert.Equal(t, want, outboxIDs(got))
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}

// TestOutboxBadRow reads rows that do not scan into the item (a NULL in
// a time.Time): with a dead-letter sink, each is dead-lettered with an
// envelope naming the table, the key and the column, and deleted, and the
// rows behind them are delivered; without one, the run fails with a
// permanent error naming them, and every row stays.
func TestOutboxBadRow(t *testing.T) {
	type withMark struct {
		ID    int64     `db:"id"`
		Topic string    `db:"topic"`
		Sent  time.Time `db:"published_at"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		bad := outboxInsert(t, db, d, table, "order.created", 2)
		good := outboxInsert(t, db, d, table, "order.paid", 3)
		_, err := db.Exec("UPDATE "+table+" SET published_at = "+outboxPH(d, 1)+" WHERE topic = 'order.paid'", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		require.NoError(t, err)
		run := func(letters deadletter.Sink) (<-chan error, chan withMark, *pipeline.Pipeline, context.Context, *clockwork.FakeClock) {
			clock := clockwork.NewFakeClock()
			opts := []pipeline.Option{pipeline.WithClock(clock)}
			if letters != nil {
				opts = append(opts, pipeline.WithDeadLetter(letters))
			}
			b := pipeline.New("outbox", opts...)
			got := make(chan withMark, 10)
			src := sluicesql.Outbox[withMark](db, d, sluicesql.OutboxOptions{Table: table, Clock: clock})
			pipeline.Sink(b, "store", pipeline.Source(b, "outbox", node.Source[withMark](src)),
				node.SinkFunc[withMark](func(_ context.Context, m withMark) error { got <- m; return nil }))
			p, err := b.Build()
			require.NoError(t, err)
			ctx := outboxContext(t)
			done := make(chan error, 1)
			go func() { _, err := p.Run(ctx); done <- err }()
			return done, got, p, ctx, clock
		}

		// Without a dead-letter sink: the run fails, the rows stay.
		done, _, _, _, _ := run(nil)
		err = <-done
		require.ErrorIs(t, err, sluicesql.ErrOutbox)
		var oe *sluicesql.OutboxError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, table, oe.Table)
		assert.Equal(t, "scan", oe.Op)
		assert.Equal(t, bad[0], oe.Key)
		assert.Equal(t, "published_at", oe.Column)
		assert.ErrorContains(t, err, "dead-letter sink")
		assert.False(t, resilience.IsTransient(err))
		assert.Equal(t, append(bad[:2:2], good...), outboxKeys(t, db, table, ""), "the rows stay")

		// With one: the bad rows are dead-lettered and deleted, the good
		// ones delivered.
		letters := deadletter.NewMemory(10)
		done, got, p, ctx, clock := run(letters)
		require.NoError(t, clock.BlockUntilContext(ctx, 1), "the outbox polls")
		p.Drain()
		require.NoError(t, <-done)
		close(got)
		var ids []int64
		for m := range got {
			ids = append(ids, m.ID)
		}
		assert.Equal(t, good, ids)
		envs := letters.Envelopes()
		require.Len(t, envs, 2)
		for i, env := range envs {
			require.ErrorAs(t, env.Err, &oe)
			assert.Equal(t, bad[i], oe.Key)
			assert.Equal(t, "published_at", oe.Column)
			assert.Equal(t, table, oe.Table)
			assert.Contains(t, env.ErrText, table)
			assert.Equal(t, fmt.Sprint(bad[i]), env.CorrelationID)
			assert.Equal(t, "outbox", env.OriginNode)
			values, ok := env.Item.(map[string]any)
			require.True(t, ok, "the item is the row's columns: %T", env.Item)
			assert.Equal(t, "order.created", values["topic"])
			assert.Nil(t, values["published_at"])
		}
		assert.Empty(t, outboxKeys(t, db, table, ""), "dead-lettered and delivered rows deleted")
	})
}

// TestOutboxOpenRefuses shows each option that is wrong is named, at
// Open, all at once.
func TestOutboxOpenRefuses(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	err := sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{
		PageSize: -1, PollInterval: -time.Second, MaxInFlight: -1, DeleteBatch: -1,
	}).Open(ctx)
	require.ErrorIs(t, err, sluicesql.ErrOutboxOptions)
	for _, field := range []string{"Table", "PageSize", "PollInterval", "MaxInFlight", "DeleteBatch"} {
		assert.ErrorContains(t, err, "OutboxOptions."+field+":")
	}
	var oe *sluicesql.OutboxOptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "Table", oe.Field)

	err = sluicesql.Outbox[outboxEvent](db, sluicesql.Postgres, sluicesql.OutboxOptions{Table: "outbox", DeleteBatch: 65536}).Open(ctx)
	assert.ErrorContains(t, err, "OutboxOptions.DeleteBatch: 65536 is above 65535")
	err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox", DeleteBatch: 32767}).Open(ctx)
	assert.ErrorContains(t, err, "OutboxOptions.DeleteBatch: 32767 is above 32766")
	err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox", MarkColumn: "id"}).Open(ctx)
	assert.ErrorContains(t, err, "OutboxOptions.MarkColumn")

	err = sluicesql.Outbox[outboxEvent](nil, sluicesql.Dialect{}, sluicesql.OutboxOptions{Table: "outbox"}).Open(ctx)
	assert.ErrorContains(t, err, "nil")
	assert.ErrorContains(t, err, "zero Dialect")
	err = sluicesql.Outbox[string](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox"}).Open(ctx)
	assert.ErrorContains(t, err, "not a struct")
	err = sluicesql.Outbox[struct{ a int }](db, sluicesql.SQLite, sluicesql.OutboxOptions{Table: "outbox"}).Open(ctx)
	assert.ErrorContains(t, err, "no field")

	// Run opens the source itself, and returns what Open refused.
	err = sluicesql.Outbox[outboxEvent](db, sluicesql.SQLite, sluicesql.OutboxOptions{}).Run(ctx, nil)
	assert.ErrorIs(t, err, sluicesql.ErrOutboxOptions)
}

// TestOutboxColumnRules reads a struct by the package's one set of
// column rules: an untagged field takes its lower-cased name, db:"-"
// none, an embedded struct's fields are the item's own.
func TestOutboxColumnRules(t *testing.T) {
	type head struct {
		Topic string // the column "topic"
	}
	type event struct {
		head
		Payload string `db:"payload"`
		Cached  string `db:"-"`
	}
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	outboxInsert(t, db, d, table, "order.created", 2)
	clock := clockwork.NewFakeClock()
	got := make(chan event, 10)
	b := pipeline.New("outbox", pipeline.WithClock(clock))
	pipeline.Sink(b, "store", pipeline.Source(b, "outbox", node.Source[event](sluicesql.Outbox[event](db, d, sluicesql.OutboxOptions{Table: table, Clock: clock}))),
		node.SinkFunc[event](func(_ context.Context, e event) error { got <- e; return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	ctx := outboxContext(t)
	done := make(chan error, 1)
	go func() { _, err := p.Run(ctx); done <- err }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	p.Drain()
	require.NoError(t, <-done)
	close(got)
	n := 0
	for e := range got {
		n++
		assert.Equal(t, "order.created", e.Topic)
		assert.Contains(t, e.Payload, "ünïcode")
		assert.Empty(t, e.Cached)
	}
	assert.Equal(t, 2, n)
}

// TestOutboxConcurrentWriter inserts rows, one transaction each, while
// the outbox reads, settles and deletes, polling as fast as the clock is
// moved: every row reaches the sink once.
func TestOutboxConcurrentWriter(t *testing.T) {
	const n = 200
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		clock := clockwork.NewFakeClock()
		ctx := outboxContext(t)
		r := startOutbox(t, ctx, clock, newOutbox(t, db, d, table, clock, func(o *sluicesql.OutboxOptions) { o.PageSize = 7; o.DeleteBatch = 5 }), nil)

		wrote := make(chan error, 1)
		go func() {
			q := "INSERT INTO " + table + " (topic, payload) VALUES ('concurrent', " + outboxPH(d, 1) + ")"
			for i := range n {
				if _, err := db.Exec(q, fmt.Sprint("row ", i)); err != nil {
					wrote <- err
					return
				}
			}
			wrote <- nil
		}()
		tick, stop := context.WithCancel(ctx)
		ticked := make(chan struct{})
		go func() {
			defer close(ticked)
			for clock.BlockUntilContext(tick, 1) == nil {
				clock.Advance(outboxPoll)
			}
		}()
		got := r.receive(t, n)
		require.NoError(t, <-wrote)
		stop()
		<-ticked
		r.waitPoll(t)
		assert.Empty(t, r.drain(t), "no row emitted twice")
		seen := map[int64]bool{}
		payloads := map[string]bool{}
		for _, e := range got {
			assert.False(t, seen[e.ID], "row %d emitted twice", e.ID)
			seen[e.ID] = true
			payloads[e.Payload] = true
		}
		assert.Len(t, payloads, n, "every row once")
		assert.Empty(t, outboxKeys(t, db, table, ""))
	})
}

// TestOutboxKeyOption reads a table whose key is not "id", with an item
// that leaves the key out and a nullable column in a pointer field.
func TestOutboxKeyOption(t *testing.T) {
	type note struct {
		Body *string `db:"body"`
	}
	ddl := map[string]string{
		"sqlite":   "CREATE TABLE %s (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NULL)",
		"postgres": "CREATE TABLE %s (seq BIGSERIAL PRIMARY KEY, body TEXT NULL)",
		"mysql":    "CREATE TABLE %s (seq BIGINT AUTO_INCREMENT PRIMARY KEY, body TEXT NULL)",
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec(fmt.Sprintf(ddl[d.String()], table))
		require.NoError(t, err)
		_, err = db.Exec("INSERT INTO " + table + " (body) VALUES ('first'), (NULL), ('third')")
		require.NoError(t, err)
		clock := clockwork.NewFakeClock()
		src := sluicesql.Outbox[note](db, d, sluicesql.OutboxOptions{Table: table, Key: "seq", PageSize: 2, Clock: clock})
		got := make(chan note, 10)
		b := pipeline.New("outbox", pipeline.WithClock(clock))
		pipeline.Sink(b, "store", pipeline.Source(b, "outbox", node.Source[note](src)),
			node.SinkFunc[note](func(_ context.Context, n note) error { got <- n; return nil }))
		p, err := b.Build()
		require.NoError(t, err)
		ctx := outboxContext(t)
		done := make(chan error, 1)
		go func() { _, err := p.Run(ctx); done <- err }()
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		p.Drain()
		require.NoError(t, <-done)
		close(got)
		var bodies []string
		for n := range got {
			if n.Body == nil {
				bodies = append(bodies, "<nil>")
			} else {
				bodies = append(bodies, *n.Body)
			}
		}
		assert.Equal(t, []string{"first", "<nil>", "third"}, bodies)
		var left int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&left))
		assert.Zero(t, left)
	})
}

// TestOutboxBadRowLetterRefused gives the pipeline a dead-letter sink
// that takes one letter: the first bad row is dead-lettered and deleted,
// the second, refused, fails the run and stays, with the rows behind it.
func TestOutboxBadRowLetterRefused(t *testing.T) {
	type strict struct {
		ID   int64     `db:"id"`
		Sent time.Time `db:"published_at"`
	}
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := outboxTable(t, db, d)
	bad := outboxInsert(t, db, d, table, "order.created", 3)
	letters := deadletter.NewMemory(1)
	b := pipeline.New("outbox", pipeline.WithDeadLetter(letters))
	src := sluicesql.Outbox[strict](db, d, sluicesql.OutboxOptions{Table: table, Clock: clockwork.NewFakeClock()})
	pipeline.Sink(b, "store", pipeline.Source(b, "outbox", node.Source[strict](src)),
		node.SinkFunc[strict](func(context.Context, strict) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(outboxContext(t))
	require.ErrorIs(t, err, deadletter.ErrFull)
	assert.ErrorContains(t, err, fmt.Sprintf("dead-letter the row with key %d", bad[1]))
	require.Len(t, letters.Envelopes(), 1)
	assert.Equal(t, bad[1:], outboxKeys(t, db, table, ""), "the letter written was deleted; the refused one stays")
}

// TestOutboxPollsOnThePipelinesClock: an outbox whose options name no
// clock waits on the pipeline's (pipeline.WithClock, given through
// SetClock), so that the fake clock of the pipeline drives its polls.
func TestOutboxPollsOnThePipelinesClock(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := outboxTable(t, db, d)
		want := outboxInsert(t, db, d, table, "before", 3)
		clock := clockwork.NewFakeClock()
		src := newOutbox(t, db, d, table, nil)
		r := startOutbox(t, outboxContext(t), clock, src, nil)
		got := r.receive(t, 3)
		r.waitPoll(t)
		later := outboxInsert(t, db, d, table, "during", 2)
		want = append(want, later...)
		clock.Advance(outboxPoll)
		got = append(got, r.receive(t, 2)...)
		r.waitPoll(t)
		assert.Empty(t, r.drain(t), "no row is emitted twice")
		assert.Equal(t, want, outboxIDs(got))
	})
}
