package sql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// reviewAudit is embedded first, so that its Note comes before the
// item's own Note in field order.
type reviewAudit struct {
	Note string `db:"note"`
}

// reviewShadow has a field Note of its own that shadows the embedded
// one: Go's selector shadow.Note is the item's own, depth 0.
type reviewShadow struct {
	reviewAudit
	ID   int64  `db:"id,key"`
	Note string `db:"note"`
}

// Review finding 1: the docs say the fields of an embedded struct are the
// item's own and upsert_columns.go says "the shallower field wins, as Go's
// own selectors"; but the walk is depth first in field order, so an
// embedded struct declared before the item's own field of the same
// column wins: Upsert writes the embedded (shadowed) value, silently.
func TestReviewUpsertShallowerFieldWins(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, note VARCHAR(50) NOT NULL)")
		require.NoError(t, err)
		u, err := sluicesql.NewUpserter[reviewShadow](db, d, sluicesql.UpsertOptions{Table: table})
		require.NoError(t, err)
		item := reviewShadow{reviewAudit: reviewAudit{Note: "embedded"}, ID: 1, Note: "own"}
		require.Equal(t, "own", item.Note, "Go's selector picks the shallower field")
		require.Nil(t, u.Write(t.Context(), []reviewShadow{item}))
		var got string
		require.NoError(t, db.QueryRow("SELECT note FROM "+table+" WHERE id = 1").Scan(&got))
		assert.Equal(t, "own", got, "the column takes the field Go's selector item.Note names")
	})
}
