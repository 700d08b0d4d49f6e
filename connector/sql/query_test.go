package sql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

func TestQueryReadsEveryRowInKeyOrder(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 25)
		src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 4})
		got := readAll(t, src)
		require.Equal(t, seq(1, 25), ids(got))
		assert.Equal(t, "order-3", got[2].Name)
		require.NotNil(t, got[2].Qty)
		assert.Equal(t, int64(3), *got[2].Qty)
		assert.Nil(t, got[6].Qty, "order 7's NULL quantity")
		assert.Nil(t, got[0].Note)
		assert.Equal(t, int64(25), src.Size())
	})
}

func TestQueryPageEdges(t *testing.T) {
	const pageSize = 5
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		for _, n := range []int{0, 1, pageSize - 1, pageSize, pageSize + 1, 2 * pageSize, 2*pageSize + 1} {
			t.Run(strconv.Itoa(n), func(t *testing.T) {
				table := tableName(t, db, d)
				createOrders(t, db, d, table, n)
				src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: pageSize})
				got := readAll(t, src)
				assert.Equal(t, seq(1, int64(n)), ids(got))
				assert.Equal(t, int64(n), src.Size())
			})
		}
	})
}

// A composite key whose pages end in the middle of a group of its first
// column, with text in the database's own order (case and accents
// included): every row once.
func TestQueryCompositeKey(t *testing.T) {
	type pair struct {
		A int    `db:"a"`
		B string `db:"b"`
		V int    `db:"v"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (a INTEGER NOT NULL, b VARCHAR(20) NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (a, b))")
		require.NoError(t, err)
		want := map[string]int{}
		v := 0
		for a := 1; a <= 4; a++ {
			for _, b := range []string{"x", "Y", "z", "ä", "ab", "日本"} {
				v++
				_, err := db.Exec("INSERT INTO "+table+" (a, b, v) VALUES ("+ph(d, 1)+", "+ph(d, 2)+", "+ph(d, 3)+")", a, b, v)
				require.NoError(t, err)
				want[fmt.Sprint(a, b)] = v
			}
		}
		for _, size := range []int{1, 4, 5, 100} {
			src := sluicesql.Query[pair](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"a", "b"}, PageSize: size})
			got := map[string]int{}
			for _, p := range readAll(t, src) {
				k := fmt.Sprint(p.A, p.B)
				_, dup := got[k]
				require.False(t, dup, "page size %d: %s read twice", size, k)
				got[k] = p.V
			}
			assert.Equal(t, want, got, "page size %d", size)
		}
	})
}

// Keys of bytes, of times and of text survive their round trip through a
// position: a source resumed at each row's position reads the rows after
// it.
func TestQueryTypedKeysResume(t *testing.T) {
	type row struct {
		K  []byte    `db:"k"`
		At time.Time `db:"at"`
		S  string    `db:"s"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		bytesType, timeType := "BLOB", "DATETIME"
		switch d {
		case sluicesql.Postgres:
			bytesType, timeType = "BYTEA", "TIMESTAMP"
		case sluicesql.MySQL:
			bytesType, timeType = "VARBINARY(16)", "DATETIME(6)"
		}
		_, err := db.Exec("CREATE TABLE " + table + " (k " + bytesType + " NOT NULL, at " + timeType + " NOT NULL, s VARCHAR(20) NOT NULL, PRIMARY KEY (k, at, s))")
		require.NoError(t, err)
		base := time.Date(2026, 3, 1, 10, 0, 0, 123456000, time.UTC)
		n := 0
		for _, k := range [][]byte{{0}, {0, 1}, {1}, {0xff}} {
			for _, at := range []time.Time{base, base.Add(time.Microsecond)} {
				_, err := db.Exec("INSERT INTO "+table+" (k, at, s) VALUES ("+ph(d, 1)+", "+ph(d, 2)+", "+ph(d, 3)+")", k, at, "é")
				require.NoError(t, err)
				n++
			}
		}
		src := sluicesql.Query[row](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k", "at", "s"}, PageSize: 3})
		var all emitter[row]
		require.NoError(t, src.Run(context.Background(), &all))
		require.Len(t, all.items, n)
		for i, pos := range all.positions {
			again := sluicesql.Query[row](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"k", "at", "s"}, PageSize: 3})
			require.NoError(t, again.Resume(pos))
			require.NoError(t, again.Open(context.Background()))
			assert.Equal(t, int64(n-1-i), again.Size())
			var rest emitter[row]
			require.NoError(t, again.Run(context.Background(), &rest))
			assert.Equal(t, all.items[i+1:], append(all.items[i+1:i+1:i+1], rest.items...), "resumed after row %d", i+1)
		}
	})
}

func TestQueryNullInAPlainFieldNamesTheColumn(t *testing.T) {
	type plain struct {
		ID  int64 `db:"id"`
		Qty int64 `db:"qty"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 10)
		src := sluicesql.Query[plain](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 3})
		var out emitter[plain]
		err := src.Run(context.Background(), &out)
		require.ErrorIs(t, err, sluicesql.ErrScan)
		var se *sluicesql.ScanError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "qty", se.Column)
		assert.Equal(t, "(id=7)", se.Row)
		assert.Equal(t, table, se.Source)
		assert.Contains(t, err.Error(), `column "qty"`)
		assert.Len(t, out.items, 6, "the rows before the page with the bad one are emitted; none after")

		// In a pipeline, the run fails with it.
		b := pipeline.New("read")
		pipeline.Sink(b, "collect", pipeline.Source(b, "query",
			sluicesql.Query[plain](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}})), &pipelinetest.Collector[plain]{})
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(context.Background())
		require.ErrorIs(t, err, sluicesql.ErrScan)
	})
}

func TestQueryIntoAMap(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 8)
		got := readAll(t, sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 3}))
		require.Len(t, got, 8)
		assert.Equal(t, map[string]any{"id": int64(2), "name": "order-2", "qty": int64(2), "note": nil}, got[1])
		assert.Nil(t, got[6]["qty"])

		some := readAll(t, sluicesql.Query[map[string]any](db, d, sluicesql.QueryOptions{
			Table: table, Key: []string{"id"}, Columns: []string{"name"}, PageSize: 3}))
		require.Len(t, some, 8)
		assert.Equal(t, map[string]any{"name": "order-8"}, some[7], "only the columns asked for")
	})
}

func TestQueryWhereAndFrom(t *testing.T) {
	type named struct {
		ID   int64
		Name string
		//lint:ignore U1000 unexported: takes no column
		skip int
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 40)
		got := readAll(t, sluicesql.Query[order](db, d, sluicesql.QueryOptions{
			Table: table, Key: []string{"id"}, Where: "qty = " + ph(d, 1), Args: []any{3}, PageSize: 2}))
		assert.Equal(t, []int64{3, 10, 17, 24, 31, 38}, ids(got))

		src := sluicesql.Query[named](db, d, sluicesql.QueryOptions{
			From: "SELECT id, name FROM " + table + " WHERE id > 30", Key: []string{"id"},
			Where: "id <> " + ph(d, 1), Args: []any{35}, PageSize: 4})
		from := readAll(t, src)
		require.Len(t, from, 9)
		assert.Equal(t, named{ID: 31, Name: "order-31"}, from[0])
		assert.Equal(t, int64(40), from[8].ID)
		assert.Equal(t, int64(9), src.Size())
	})
}

// Fields take columns by tag, or by their lower-cased name; an embedded
// struct's fields are the item's own; db:"-", unexported fields and
// embedded pointers take none.
func TestQueryStructFields(t *testing.T) {
	type Named struct {
		Name string // the column "name"
	}
	type Extra struct{ Ignored int }
	type item struct {
		Named
		*Extra
		ID    int64   `db:"id"`
		Count *int64  `db:"qty"`
		Note  *string `db:"-"`
		//lint:ignore U1000 unexported: takes no column
		note string
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		createOrders(t, db, d, table, 3)
		got := readAll(t, sluicesql.Query[item](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, PageSize: 2}))
		require.Len(t, got, 3)
		assert.Equal(t, "order-2", got[1].Name)
		assert.Equal(t, int64(2), got[1].ID)
		require.NotNil(t, got[1].Count)
		assert.Equal(t, int64(2), *got[1].Count)
		assert.Nil(t, got[1].Note)
		assert.Nil(t, got[1].Extra)
	})
}
