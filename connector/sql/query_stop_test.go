package sql_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint"
	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A run drained, or cancelled, in the middle of a read saves the position
// of the last settled row; the next run reads from the row after it:
// across both, every row is written once.
func TestQueryStoppedMidReadResumes(t *testing.T) {
	for _, stop := range []string{"drain", "cancel"} {
		t.Run(stop, func(t *testing.T) {
			eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
				table := tableName(t, db, d)
				createOrders(t, db, d, table, 300)
				store := checkpoint.NewMemory()
				written := map[int64]int{}
				run := func(stopAt int64) error {
					b := pipeline.New("copy", pipeline.WithCheckpoint(store, time.Hour))
					rows := pipeline.Source(b, "orders", sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 8}))
					var p atomic.Pointer[pipeline.Pipeline]
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					pipeline.Sink(b, "store", rows, node.SinkFunc[order](func(ctx context.Context, o order) error {
						if err := ctx.Err(); err != nil {
							return err
						}
						written[o.ID]++
						if o.ID == stopAt {
							if stop == "drain" {
								p.Load().Drain()
							} else {
								cancel()
							}
						}
						return nil
					}))
					pp, err := b.Build()
					require.NoError(t, err)
					p.Store(pp)
					_, err = pp.Run(ctx)
					return err
				}
				err := run(77)
				if stop == "drain" {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, context.Canceled)
				}
				first := len(written)
				assert.GreaterOrEqual(t, first, 77)
				require.NoError(t, run(-1))
				for id := int64(1); id <= 300; id++ {
					assert.Equal(t, 1, written[id], "order %d", id)
				}
			})
		})
	}
}
