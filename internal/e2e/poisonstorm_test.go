package e2e_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A poison storm through a sink that writes with its context
// (db.ExecContext(ctx, ...)), whose answer comes 30 ms after its commit,
// behind an idempotency guard on PostgreSQL:
// 400 good messages and 16 poison ones, OnItemFailure = Fail, so that each
// poison delivery fails the run while writes are in flight, and the
// consumer starts again, until every poison message is dead-lettered after
// MaxDeliveries runs. The table ends with every good message once: 0
// duplicate rows. The guards' counts agree with the table: the rows are
// the writes the guards counted, and no write had an unknown outcome (the
// failing run let the writes in flight finish). Before, the failing run
// cancelled them, committed inserts returned context.Canceled, the guard
// released their keys, and the next run wrote them again.
func TestPoisonStormWritesEachRowOnce(t *testing.T) {
	rmqURL := servicetest.RabbitMQ(t)
	dsn := servicetest.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	var rb [4]byte
	_, _ = rand.Read(rb[:])
	suffix := hex.EncodeToString(rb[:])
	table, queue := "sluice_storm_"+suffix, "sluice-storm."+suffix
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE TABLE "+table+"_writes (id TEXT NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, tb := range []string{"_writes", "_idem"} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table+tb)
		}
	})
	store, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table+"_idem"))
	require.NoError(t, err)

	const good, poison, maxDeliveries = 400, 16, 3
	cfg := rabbitmq.SourceConfig{URL: rmqURL, Queue: queue, Prefetch: 64, Declare: &rabbitmq.QueueDeclaration{}, MaxDeliveries: maxDeliveries}
	setup, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	setup.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	require.NoError(t, setup.Open(ctx))
	require.NoError(t, setup.Close(ctx))
	conn, err := amqp.Dial(rmqURL)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
		_ = conn.Close()
	})
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	for i := range good {
		ids := []string{fmt.Sprintf("order-%05d", i)}
		if i%(good/poison) == good/poison/2 {
			ids = append(ids, fmt.Sprintf("%s%d", poisonPrefix, i))
		}
		for _, id := range ids {
			dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{Body: []byte(id), MessageId: id})
			require.NoError(t, err)
			ok, err := dc.WaitContext(ctx)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}

	var (
		mu                   sync.Mutex
		written              = map[string]bool{}
		dead                 = map[string]bool{}
		guardWritten         int64
		duplicates, unknowns int64
	)
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if m, ok := env.Item.(rabbitmq.Message); ok {
			dead[m.MessageID] = true
		}
		return nil
	})
	finished := func() bool { return len(written) == good && len(dead) == poison }
	failedRuns := 0
	for run := 0; run < poison*maxDeliveries+10; run++ {
		src, err := rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		sink := node.SinkFunc[rabbitmq.Message](func(ctx context.Context, m rabbitmq.Message) error {
			// The insert commits, then its answer takes a while (a slow
			// network, a busy server): a cancellation in that window
			// returns context.Canceled for a row that is in the table. The
			// ids are the test's own, safe to put in the text; without
			// arguments the statements go in one simple query.
			q := "BEGIN; INSERT INTO " + table + "_writes (id) VALUES ('" + m.MessageID + "'); COMMIT; SELECT pg_sleep(0.03)"
			if _, err := db.ExecContext(ctx, q); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			written[m.MessageID] = true
			if finished() {
				src.Stop()
			}
			return nil
		})
		guard := idempotency.Sink(sink, store, func(m rabbitmq.Message) string { return m.MessageID },
			idempotency.WithLease(time.Minute), idempotency.WithName("writes"))
		b := pipeline.New("storm", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Fail
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Constant(5 * time.Millisecond)
		}))
		handled := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
			node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
				if strings.HasPrefix(m.MessageID, poisonPrefix) {
					return m, resilience.MarkPermanent(errors.New("unparseable order"))
				}
				return m, nil
			}))
		pipeline.Sink(b, "write", handled, guard, pipeline.Parallel(8))
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(ctx)
		st := guard.Stats()
		guardWritten += st.Written
		duplicates += st.Duplicates
		unknowns += st.Unknown + st.LostClaims + st.Unrecorded
		if err != nil {
			require.ErrorContains(t, err, "unparseable order", "run %d fails only because of a poison message", run+1)
			failedRuns++
		}
		mu.Lock()
		done := finished()
		mu.Unlock()
		if done {
			break
		}
	}
	require.Len(t, dead, poison, "every poison message is dead-lettered")
	require.Len(t, written, good, "every good message is written")
	assert.Equal(t, poison*maxDeliveries, failedRuns, "each poison delivery failed one run")

	var rows, distinct int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT id) FROM "+table+"_writes").Scan(&rows, &distinct))
	assert.Equal(t, int64(good), distinct, "every good message is in the table")
	assert.Equal(t, int64(good), rows, "0 duplicate rows")
	assert.Equal(t, rows, guardWritten, "the guards counted every row they wrote")
	assert.LessOrEqual(t, rows-distinct, unknowns, "rows written twice are at most the writes of unknown outcome")
	assert.Zero(t, unknowns, "no write had an unknown outcome: the failing runs let them finish")
	t.Logf("%d failed runs; the guards absorbed %d duplicates", failedRuns, duplicates)
}
