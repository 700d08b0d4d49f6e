package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// outboxBenchRows is the rows each iteration of BenchmarkOutbox publishes.
const outboxBenchRows = 5000

// BenchmarkOutbox publishes and deletes the rows of an outbox table on
// SQLite: through an Outbox in a pipeline (a sink that does nothing),
// beside a hand-written loop that reads a page, "publishes" it and
// deletes it with one DELETE ... IN per page. Rows per second is the
// metric; the loop does less (it settles nothing, and holds nothing in
// flight), so it is the ceiling.
func BenchmarkOutbox(b *testing.B) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "bench.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(b, err)
	defer db.Close()
	d := sluicesql.SQLite
	table := "bench_outbox"
	_, err = db.Exec(fmt.Sprintf(outboxDDL["sqlite"], table))
	require.NoError(b, err)
	fill := func() {
		tx, err := db.Begin()
		require.NoError(b, err)
		for i := range outboxBenchRows {
			_, err := tx.Exec("INSERT INTO "+table+" (topic, payload) VALUES ('order.created', ?)", fmt.Sprintf(`{"order":%d}`, i))
			require.NoError(b, err)
		}
		require.NoError(b, tx.Commit())
	}

	b.Run("impl=loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			fill()
			b.StartTimer()
			n := outboxLoop(b, db, table)
			require.Equal(b, outboxBenchRows, n)
		}
		b.ReportMetric(float64(outboxBenchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("impl=sluice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			fill()
			src := sluicesql.Outbox[outboxEvent](db, d, sluicesql.OutboxOptions{Table: table})
			var p *pipeline.Pipeline
			var got atomic.Int64
			bl := pipeline.New("bench")
			events := pipeline.Source(bl, "outbox", node.Source[outboxEvent](src))
			pipeline.Sink(bl, "publish", events, node.SinkFunc[outboxEvent](func(context.Context, outboxEvent) error {
				if got.Add(1) == outboxBenchRows {
					p.Drain()
				}
				return nil
			}))
			p, err = bl.Build()
			require.NoError(b, err)
			b.StartTimer()
			_, err = p.Run(context.Background())
			require.NoError(b, err)
		}
		b.StopTimer()
		var left int
		require.NoError(b, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&left))
		require.Zero(b, left)
		b.ReportMetric(float64(outboxBenchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// outboxLoop is the hand-written outbox: read a page in key order,
// publish it, delete it, until the table is empty.
func outboxLoop(b *testing.B, db *sql.DB, table string) int {
	n := 0
	after := int64(-1)
	for {
		rows, err := db.Query("SELECT id, topic, payload FROM "+table+" WHERE id > ? ORDER BY id LIMIT 100", after)
		require.NoError(b, err)
		var ids []any
		for rows.Next() {
			var e outboxEvent
			require.NoError(b, rows.Scan(&e.ID, &e.Topic, &e.Payload))
			ids = append(ids, e.ID)
			after = e.ID
		}
		require.NoError(b, rows.Err())
		rows.Close()
		if len(ids) == 0 {
			return n
		}
		n += len(ids)
		_, err = db.Exec("DELETE FROM "+table+" WHERE id IN (?"+strings.Repeat(", ?", len(ids)-1)+")", ids...)
		require.NoError(b, err)
	}
}
