package sql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
)

// renaming is an emitter whose consumer renames the "id" column of the
// map it is handed, as a downstream Transform may, at once; it refuses
// the item failAt (counted from 1) after renaming it, as a run's end
// refuses an emit.
type renaming struct {
	ids    []any
	failAt int
}

var errRefused = errors.New("refused")

func (m *renaming) Emit(ctx context.Context, item map[string]any) error {
	return m.EmitAt(ctx, item, nil)
}

func (m *renaming) EmitTracked(ctx context.Context, item map[string]any, done func(node.Outcome)) error {
	done(node.Delivered)
	return m.EmitAt(ctx, item, nil)
}

func (m *renaming) EmitAt(_ context.Context, item map[string]any, _ []byte) error {
	id := item["id"]
	item["order_id"] = id
	delete(item, "id")
	if len(m.ids)+1 == m.failAt {
		m.failAt = 0
		return errRefused
	}
	m.ids = append(m.ids, id)
	return nil
}

// The source found where its next page starts by reading the key of the
// page's last row back from the item it had emitted: a map item is
// shared with the nodes downstream, and one that renamed or deleted the
// key column made the next page start after NULL, which finds no row, so
// the run ended cleanly having lost the rest of the table, and the
// position saved made a rerun lose it too (a review's finding; under
// -race it was also a data race). The key is now read from the position
// made before the emit. SQLite selected the key again and was spared.
func TestMapItemChangedDownstreamLosesNoRow(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 7)
		for _, size := range []int{1, 2, 3, 7, 8} {
			src := sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: size})
			require.NoError(t, src.Resume(nil))
			e := &renaming{}
			require.NoError(t, src.Run(t.Context(), e))
			assert.Len(t, e.ids, 7, "page size %d: ids emitted: %v", size, e.ids)

			// A refused emit: the next Run goes on after the last row
			// emitted, whose map was changed too.
			src = sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: size})
			require.NoError(t, src.Resume(nil))
			e = &renaming{failAt: 3}
			require.ErrorIs(t, src.Run(t.Context(), e), errRefused)
			require.NoError(t, src.Run(t.Context(), e))
			assert.Len(t, e.ids, 7, "page size %d, an emit refused: ids emitted: %v", size, e.ids)
		}
	})
}
