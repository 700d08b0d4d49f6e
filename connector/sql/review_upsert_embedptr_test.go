package sql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// ReviewMeta is embedded by pointer.
type ReviewMeta struct {
	Source string `db:"source"`
}

// reviewEmbedPtr embeds a struct by pointer, untagged: Query leaves such
// a field out ("an embedded pointer would have to be allocated: not
// read"), and the docs say Upsert names its columns "as a Query reads
// them".
type reviewEmbedPtr struct {
	ID  int64 `db:"id,key"`
	Qty int   `db:"qty"`
	*ReviewMeta
}

// Review finding 2: Upsert takes an untagged embedded pointer as a column
// of its own, named after the type ("reviewmeta"), with the *ReviewMeta as
// its value: NewUpserter accepts the type, and then every row fails at
// run time (no such column, or an unsupported argument type), each split
// down to single rows and dead-lettered, where Query reads the same table
// into the same type without complaint.
func TestReviewUpsertEmbeddedPointerIsNotAColumn(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, qty INTEGER NOT NULL)")
		require.NoError(t, err)

		u, err := sluicesql.NewUpserter[reviewEmbedPtr](db, d, sluicesql.UpsertOptions{Table: table})
		if err != nil {
			return // refused at once, naming the field: acceptable
		}
		items := []reviewEmbedPtr{{ID: 1, Qty: 1}, {ID: 2, Qty: 2, ReviewMeta: &ReviewMeta{Source: "x"}}}
		errs := u.Write(t.Context(), items)
		if !assert.Nil(t, errs, "the rows a Query reads back are written") {
			t.Logf("first row's error: %v", errs[0])
		}
	})
}
