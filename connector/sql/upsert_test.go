package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A product is the row the upsert tests write: qty has a CHECK
// constraint, name may be NULL.
type product struct {
	ID   int64   `db:"id,key"`
	Name *string `db:"name"`
	Qty  int     `db:"qty"`
}

func str(s string) *string { return &s }

// productTable creates the test's products table: qty_nonneg checks qty,
// label is NOT NULL with a default, so that a row may leave it out.
func productTable(t *testing.T, db *sql.DB, d sluicesql.Dialect) string {
	t.Helper()
	table := tableName(t, db, d)
	ddl := "CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, name VARCHAR(200) NULL, qty INTEGER NOT NULL, CONSTRAINT qty_nonneg CHECK (qty >= 0))"
	if d == sluicesql.MySQL {
		ddl += " DEFAULT CHARSET=utf8mb4"
	}
	_, err := db.Exec(ddl)
	require.NoError(t, err)
	return table
}

// products returns n products with ids from 1, quantity i, and the
// quantity -1 (which qty_nonneg refuses) for the indexes in bad.
func products(n int, bad ...int) []product {
	out := make([]product, n)
	for i := range out {
		out[i] = product{ID: int64(i + 1), Name: str(fmt.Sprintf("p%d", i+1)), Qty: i}
		if slices.Contains(bad, i) {
			out[i].Qty = -1
		}
	}
	return out
}

// rows reads the table back, in id order.
func rows(t *testing.T, db *sql.DB, table string) []product {
	t.Helper()
	rs, err := db.Query("SELECT id, name, qty FROM " + table + " ORDER BY id")
	require.NoError(t, err)
	defer rs.Close()
	var out []product
	for rs.Next() {
		var p product
		var name sql.NullString
		require.NoError(t, rs.Scan(&p.ID, &name, &p.Qty))
		if name.Valid {
			p.Name = &name.String
		}
		out = append(out, p)
	}
	require.NoError(t, rs.Err())
	return out
}

// upsertRun is one run of a pipeline that upserts items into table, with
// dead letters to a memory sink.
type upsertRun struct {
	res  pipeline.Result
	err  error
	dlq  *deadletter.Memory
	src  *pipelinetest.SliceSource[product]
	node pipeline.NodeStats
}

func runUpsert(t *testing.T, ctx context.Context, db *sql.DB, d sluicesql.Dialect, o sluicesql.UpsertOptions, items []product, opts ...pipeline.Option) upsertRun {
	t.Helper()
	r := upsertRun{dlq: deadletter.NewMemory(len(items) + 1), src: pipelinetest.NewTrackedSource(items...)}
	opts = append([]pipeline.Option{pipeline.WithDeadLetter(r.dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
		o.ItemRetry.Backoff = resilience.NoBackoff()
	})}, opts...)
	b := pipeline.New("upsert", opts...)
	in := pipeline.Source(b, "read", r.src, pipeline.SourceKey(func(p product) string { return fmt.Sprint(p.ID) }))
	sluicesql.Upsert(b, "store", in, db, d, o)
	p, err := b.Build()
	require.NoError(t, err)
	r.res, r.err = p.Run(ctx)
	r.node, _ = r.res.Node("store")
	return r
}

// wantCode is the code each database gives a CHECK violation.
func wantCheckCode(d sluicesql.Dialect) string {
	switch d {
	case sluicesql.Postgres:
		return "23514"
	case sluicesql.MySQL:
		return "4025" // MariaDB's; MySQL's is 3819
	}
	return "SQLITE_CONSTRAINT_CHECK"
}

// A batch of 1,000 with one row that breaks a CHECK constraint writes the
// other 999 and dead-letters the one, naming the constraint and the code.
func TestUpsertIsolatesOneBadRowInAThousand(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		const bad = 637
		items := products(1000, bad)
		r := runUpsert(t, t.Context(), db, d, sluicesql.UpsertOptions{Table: table, BatchSize: 1000}, items)
		require.NoError(t, r.err)

		got := rows(t, db, table)
		want := slices.Delete(slices.Clone(items), bad, bad+1)
		assert.Equal(t, want, got)
		envs := r.dlq.Envelopes()
		require.Len(t, envs, 1)
		assert.Equal(t, items[bad], envs[0].Item)
		assert.Equal(t, "store", envs[0].OriginNode)
		assert.Equal(t, fmt.Sprint(bad+1), envs[0].CorrelationID)
		assert.Equal(t, 1, envs[0].Attempts, "a permanent error is not retried")
		var re *sluicesql.RowError
		require.ErrorAs(t, envs[0].Err, &re)
		assert.ErrorIs(t, envs[0].Err, sluicesql.ErrWrite)
		assert.Equal(t, "qty_nonneg", re.Constraint)
		assert.Equal(t, wantCheckCode(d), re.Code)
		assert.Equal(t, table, re.Table)
		assert.Contains(t, envs[0].Err.Error(), `constraint "qty_nonneg"`)
		assert.Contains(t, envs[0].Err.Error(), wantCheckCode(d))
		assert.False(t, sluicesql.Classifier(d).IsTransient(envs[0].Err))
		assert.Equal(t, int64(999), r.node.Out)
		assert.Equal(t, int64(1), r.node.DeadLettered)
		assert.Equal(t, int64(0), r.node.ItemRetries)
		for i, o := range r.src.Outcomes() {
			want := node.Delivered
			if i == bad {
				want = node.DeadLettered
			}
			assert.Equal(t, []node.Outcome{want}, o, "item %d", i)
		}
	})
}

// Several bad rows of one batch, all bad, a batch of one, and statements
// of a few rows in one transaction: each bad row alone is dead-lettered,
// every other row written.
func TestUpsertBadRows(t *testing.T) {
	for _, c := range []struct {
		name      string
		n         int
		bad       []int
		batch     int
		maxParams int
	}{
		{"several", 100, []int{0, 37, 38, 99}, 100, 0},
		{"all", 10, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, 0},
		{"batch-of-one", 5, []int{2}, 1, 0},
		{"one-of-one", 1, []int{0}, 10, 0},
		{"statements", 20, []int{4, 13}, 20, 9}, // 3 rows a statement, 7 in one transaction
		{"none", 20, nil, 20, 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
				table := productTable(t, db, d)
				items := products(c.n, c.bad...)
				r := runUpsert(t, t.Context(), db, d, sluicesql.UpsertOptions{Table: table, BatchSize: c.batch, MaxParams: c.maxParams}, items)
				require.NoError(t, r.err)
				var want, dead []product
				for i, p := range items {
					if slices.Contains(c.bad, i) {
						dead = append(dead, p)
					} else {
						want = append(want, p)
					}
				}
				assert.Equal(t, want, rows(t, db, table))
				var got []product
				for _, e := range r.dlq.Envelopes() {
					got = append(got, e.Item.(product))
					var re *sluicesql.RowError
					if assert.ErrorAs(t, e.Err, &re) {
						assert.Equal(t, "qty_nonneg", re.Constraint)
					}
				}
				assert.Equal(t, dead, got, "each bad row dead-lettered once, in order")
				assert.Equal(t, int64(len(want)), r.node.Out)
			})
		})
	}
}

// No input writes nothing and ends cleanly.
func TestUpsertEmptyInput(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		r := runUpsert(t, t.Context(), db, d, sluicesql.UpsertOptions{Table: table}, nil)
		require.NoError(t, r.err)
		assert.Empty(t, rows(t, db, table))
		assert.Empty(t, r.dlq.Envelopes())
		assert.Equal(t, int64(0), r.node.Out)
	})
}

// Running the same items twice writes each row once; running changed
// items updates them; NULL and unicode survive the trip.
func TestUpsertIsIdempotentAndKeepsNullAndUnicode(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		items := products(50)
		items[3].Name = nil
		items[4].Name = str("naïve — 日本語 🚀 \u00e9\u0301 'quote' \"dq\" `bt` \\")
		items[5].Name = str("")
		o := sluicesql.UpsertOptions{Table: table, BatchSize: 16}
		for range 2 {
			r := runUpsert(t, t.Context(), db, d, o, items)
			require.NoError(t, r.err)
			assert.Equal(t, items, rows(t, db, table))
		}
		changed := slices.Clone(items)
		for i := range changed {
			changed[i].Qty += 100
		}
		changed[3].Name = str("now named")
		changed[4].Name = nil
		changed = append(changed, product{ID: 51, Qty: 7})
		r := runUpsert(t, t.Context(), db, d, o, changed)
		require.NoError(t, r.err)
		assert.Equal(t, changed, rows(t, db, table))
	})
}

// Within one batch a key given twice ends with its last item's values,
// on every database (PostgreSQL refuses one statement that updates a row
// twice; the split writes the two apart, in order).
func TestUpsertSameKeyTwiceInABatch(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		items := []product{{ID: 1, Qty: 1}, {ID: 2, Qty: 2}, {ID: 1, Qty: 3}, {ID: 3, Qty: 4}}
		r := runUpsert(t, t.Context(), db, d, sluicesql.UpsertOptions{Table: table}, items)
		require.NoError(t, r.err)
		assert.Empty(t, r.dlq.Envelopes())
		assert.Equal(t, []product{{ID: 1, Qty: 3}, {ID: 2, Qty: 2}, {ID: 3, Qty: 4}}, rows(t, db, table))
	})
}

// A run cancelled while a part batch waits for more rows writes nothing
// and settles nothing: the part batch is not written as if the input had
// ended.
func TestUpsertCancelledRun(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		ctx, cancel := context.WithCancel(t.Context())
		var outcomes []node.Outcome
		items := products(5)
		src := node.SourceFunc[product](func(ctx context.Context, out node.Emitter[product]) error {
			for _, p := range items {
				if err := out.EmitTracked(ctx, p, func(o node.Outcome) { outcomes = append(outcomes, o) }); err != nil {
					return err
				}
			}
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		dlq := deadletter.NewMemory(10)
		b := pipeline.New("upsert-cancel", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
		}))
		sluicesql.Upsert(b, "store", pipeline.Source(b, "read", src), db, d, sluicesql.UpsertOptions{Table: table, BatchSize: 100})
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(ctx)
		require.ErrorIs(t, err, context.Canceled)
		assert.Empty(t, rows(t, db, table))
		assert.Empty(t, dlq.Envelopes())
		assert.NotContains(t, outcomes, node.Delivered)
		assert.NotContains(t, outcomes, node.DeadLettered)
	})
}

// Options that cannot work are refused, each problem named.
func TestNewUpserterRefusesOptions(t *testing.T) {
	db := openSQLite(t)
	type noKey struct {
		A int `db:"a"`
	}
	type hidden struct {
		a int
	}
	_ = hidden{a: 1}
	_, err := sluicesql.NewUpserter[noKey](nil, sluicesql.Dialect{}, sluicesql.UpsertOptions{BatchSize: -1, MaxParams: -2, Linger: -1})
	require.ErrorIs(t, err, sluicesql.ErrUpsertOptions)
	for _, want := range []string{"db is nil", "zero Dialect", "Table is empty", "BatchSize -1", "MaxParams -2", "Linger -1ns", "no conflict key"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = sluicesql.NewUpserter[noKey](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "t", Key: []string{"b"}})
	assert.ErrorContains(t, err, `Key column "b" is not a column`)
	_, err = sluicesql.NewUpserter[hidden](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "t"})
	assert.ErrorContains(t, err, "no exported field")
	_, err = sluicesql.NewUpserter[int](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "t"})
	assert.ErrorContains(t, err, "int is not a struct")
	_, err = sluicesql.NewUpserter[product](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "t", MaxParams: 2})
	assert.ErrorContains(t, err, "MaxParams 2 is less than the 3 columns")
	u, err := sluicesql.NewUpserter[noKey](db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "t", Key: []string{"a"}})
	require.NoError(t, err)
	assert.Equal(t, sluicesql.DefaultBatchSize, u.BatchSize())

	// Upsert adds the node, and Build refuses it, naming it, joined with
	// the other nodes' problems.
	b := pipeline.New("upsert-refused")
	sluicesql.Upsert(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource[product]()), db, sluicesql.SQLite, sluicesql.UpsertOptions{}, pipeline.Buffer(-3))
	_, err = b.Build()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	assert.ErrorIs(t, err, sluicesql.ErrUpsertOptions)
	assert.ErrorContains(t, err, `pipeline "upsert-refused": node "store": sql: invalid upsert options: Table is empty`)
	assert.ErrorContains(t, err, `node "store": Buffer(-3)`)
	assert.NotContains(t, err.Error(), "ForEachBatch", "no problem of the placeholder node")
}

// Write by hand: nil for an empty slice and for a batch written whole;
// one error per item otherwise; ctx's error once ctx is done.
func TestUpserterWrite(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table})
		require.NoError(t, err)
		assert.Nil(t, u.Write(t.Context(), nil))
		assert.Nil(t, u.Write(t.Context(), products(3)))
		errs := u.Write(t.Context(), products(4, 1))
		require.Len(t, errs, 4)
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], sluicesql.ErrWrite)
		assert.NoError(t, errs[2])
		assert.NoError(t, errs[3])
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		errs = u.Write(ctx, products(2))
		require.Len(t, errs, 2)
		assert.ErrorIs(t, errs[0], context.Canceled)
		assert.ErrorIs(t, errs[1], context.Canceled)
		assert.Len(t, rows(t, db, table), 4, "ids 1 to 4: id 2 stayed as the first Write left it")
	})
}

// A contact is the row of the NOT NULL and UNIQUE tests.
type contact struct {
	ID    int64   `db:"id,key"`
	Email *string `db:"email"`
}

// A NOT NULL and a UNIQUE violation are dead-lettered alone, each naming
// the column or the constraint, with the database's code. The UNIQUE one
// is an update of id 3 to the email of id 1: an insert of a new id with a
// taken email would, on MySQL, update the row that holds the email, as
// MySQL's upsert matches on any unique index.
func TestUpsertNamesNotNullAndUnique(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL, CONSTRAINT " + table + "_uq UNIQUE (email))")
		require.NoError(t, err)
		items := []contact{{1, str("a@x")}, {2, nil}, {3, str("c@x")}, {3, str("a@x")}, {5, str("e@x")}}
		dlq := deadletter.NewMemory(10)
		b := pipeline.New("upsert-contacts", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
		}))
		sluicesql.Upsert(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(items...)), db, d, sluicesql.UpsertOptions{Table: table})
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(t.Context())
		require.NoError(t, err)

		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
		assert.Equal(t, 3, n)
		envs := dlq.Envelopes()
		require.Len(t, envs, 2)
		var null, unique *sluicesql.RowError
		require.ErrorAs(t, envs[0].Err, &null)
		require.ErrorAs(t, envs[1].Err, &unique)
		assert.Equal(t, items[1], envs[0].Item)
		assert.Equal(t, items[3], envs[1].Item)
		switch d {
		case sluicesql.Postgres:
			assert.Equal(t, "23502", null.Code)
			assert.Equal(t, "email", null.Column)
			assert.Equal(t, "23505", unique.Code)
			assert.Equal(t, table+"_uq", unique.Constraint)
		case sluicesql.MySQL:
			assert.Equal(t, "1048", null.Code)
			assert.Equal(t, "email", null.Column)
			assert.Equal(t, "1062", unique.Code)
			assert.Equal(t, table+"_uq", unique.Constraint)
		default:
			assert.Equal(t, "SQLITE_CONSTRAINT_NOTNULL", null.Code)
			assert.Equal(t, "email", null.Column)
			assert.Equal(t, "SQLITE_CONSTRAINT_UNIQUE", unique.Code)
			assert.Equal(t, "email", unique.Column)
		}
	})
}

// Write is safe for concurrent use: four goroutines writing rows of their
// own, in batches of their own sizes, write every row once.
func TestUpserterWriteConcurrently(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := productTable(t, db, d)
		u, err := sluicesql.NewUpserter[product](db, d, sluicesql.UpsertOptions{Table: table, MaxParams: 30})
		require.NoError(t, err)
		items := products(400)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				mine := items[w*100 : (w+1)*100]
				for start := 0; start < len(mine); start += 7 + w {
					assert.Nil(t, u.Write(t.Context(), mine[start:min(start+7+w, len(mine))]))
				}
			})
		}
		wg.Wait()
		assert.Equal(t, items, rows(t, db, table))
	})
}

// With Linger, a part batch of an input that does not end is written once
// the linger passes on the pipeline's clock; items that come after it
// fired make a part batch of their own, written once its linger passes.
func TestUpsertLingerWritesAPartBatch(t *testing.T) {
	db := openSQLite(t)
	table := productTable(t, db, sluicesql.SQLite)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	items := products(3)
	settled := make(chan node.Outcome, len(items))
	gate := make(chan struct{})
	var once sync.Once
	src := node.SourceFunc[product](func(ctx context.Context, out node.Emitter[product]) error {
		for i, p := range items {
			if i == 1 {
				<-gate // the later items come after the first linger
			}
			if err := out.EmitTracked(ctx, p, func(o node.Outcome) { settled <- o }); err != nil {
				return err
			}
		}
		<-ctx.Done() // a source that follows a table: no end
		return ctx.Err()
	})
	clock := clockwork.NewFakeClock()
	b := pipeline.New("upsert-linger", pipeline.WithClock(clock))
	sluicesql.Upsert(b, "store", pipeline.Source(b, "read", src), db, sluicesql.SQLite,
		sluicesql.UpsertOptions{Table: table, BatchSize: 100, Linger: time.Second})
	p, err := b.Build()
	require.NoError(t, err)
	run := pipelinetest.Start(ctx, p)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the part batch's linger waits")
	assert.Empty(t, rows(t, db, table), "nothing written before the linger")
	// The linger timer starts with the first item gathered; on a loaded
	// machine the later items may come after it fired, and start a linger
	// of their own. So the clock moves on by a linger whenever one waits
	// (a fired timer leaves the clock's waiters in Advance), until every
	// item settled: one Advance would leave them waiting for good.
	advancing := make(chan struct{})
	go func() {
		defer close(advancing)
		for clock.BlockUntilContext(ctx, 1) == nil {
			clock.Advance(time.Second)
		}
	}()
	defer func() { cancel(); <-advancing }()
	for range items {
		select {
		case o := <-settled:
			assert.Equal(t, node.Delivered, o)
			once.Do(func() { close(gate) })
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	assert.Equal(t, items, rows(t, db, table))
	cancel()
	_, err = run.Wait()
	require.ErrorIs(t, err, context.Canceled)
}
