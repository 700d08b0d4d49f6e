package sql_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Review finding 10: on MySQL the constraint is read from the message
// with the first match of mysqlConstraint (classify.go), and a duplicate
// entry's message quotes the row's own value before "for key": a value
// that holds "Constraint '" names a constraint of the data's choosing in
// the RowError and its dead letter, instead of the unique key broken.
func TestReviewUpsertMySQLConstraintFromData(t *testing.T) {
	db := openMariaDB(t)
	table := tableName(t, db, sluicesql.MySQL)
	_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL, CONSTRAINT " + table + "_uq UNIQUE (email))")
	require.NoError(t, err)
	u, err := sluicesql.NewUpserter[contact](db, sluicesql.MySQL, sluicesql.UpsertOptions{Table: table})
	require.NoError(t, err)
	v := "Constraint 'orders_fk' x"
	// Row 1 takes the value; row 2 is then updated to it (an insert of a
	// new id would update row 1 instead: MySQL matches any unique index).
	require.Nil(t, u.Write(t.Context(), []contact{{1, &v}, {2, str("b@x")}}))
	errs := u.Write(t.Context(), []contact{{2, &v}})
	require.Len(t, errs, 1)
	var re *sluicesql.RowError
	require.ErrorAs(t, errs[0], &re)
	t.Logf("%v", errs[0])
	assert.Equal(t, "1062", re.Code)
	assert.Equal(t, table+"_uq", re.Constraint, "the key the row broke, not a name in its data")
}
