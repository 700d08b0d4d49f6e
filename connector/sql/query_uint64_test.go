package sql_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Finding 7: go-sql-driver/mysql gives a BIGINT UNSIGNED above
// math.MaxInt64 as a uint64 in the text protocol (the source's first page,
// a statement without arguments) but as its decimal digits in []byte in
// the binary protocol (every later page, which has the key's arguments).
// isText("UNSIGNED BIGINT") is false, so a map item's value of the column
// is a uint64 in the first page's items and []byte in the others', and
// the position holds the digits as bytes. (MariaDB 10.11 still compares
// them right: no row is lost here.)
func TestQueryBigUnsignedKeyOfMapItem(t *testing.T) {
	db := openMariaDB(t)
	d := sluicesql.MySQL
	table := tableName(t, db, d)
	_, err := db.Exec("CREATE TABLE " + table + " (k BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL)")
	require.NoError(t, err)
	// Small keys too: the binary protocol gives them as int64.
	for i, k := range []uint64{1, 2, 3, 18446744073709551610, 18446744073709551611, 18446744073709551615} {
		_, err := db.Exec(fmt.Sprintf("INSERT INTO %s (k, v) VALUES (%d, %d)", table, k, i))
		require.NoError(t, err)
	}
	got := readAll(t, sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k"}, PageSize: 2}))
	var types []string
	for _, m := range got {
		types = append(types, fmt.Sprintf("%T", m["k"]))
	}
	assert.Len(t, got, 6, "every row: %v", got)
	if len(got) == 6 {
		assert.Equal(t, uint64(3), got[2]["k"])
		assert.Equal(t, uint64(18446744073709551615), got[5]["k"])
	}
	assert.Equal(t, []string{"uint64", "uint64", "uint64", "uint64", "uint64", "uint64"}, types, "the column's value has one type in every item")
}
