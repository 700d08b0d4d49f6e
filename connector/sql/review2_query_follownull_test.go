package sql_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
)

// Review2 finding 7: the package doc says the source "fails the run with
// a KeyError rather than lose a row", and looks for NULL in a key or
// watermark column "at the first Open of each run". A following source
// (Follow > 0) never looks again: a row inserted while it follows with
// NULL in its watermark (a nullable updated_at a writer left unset) is
// never read, by this poll or any later one, and the run goes on and
// ends cleanly, its position past the row. Only the next run's Open
// counts it and fails; a run that follows for weeks never says.
func TestReview2QueryFollowLosesNullWatermarkRow(t *testing.T) {
	type item struct {
		ID      int64 `db:"id"`
		Version int64 `db:"version"`
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d sluicesql.Dialect) {
		table := tableName(t, db, d)
		_, err := db.Exec("CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, version BIGINT NULL)")
		require.NoError(t, err)
		_, err = db.Exec("INSERT INTO " + table + " (id, version) VALUES (1, 1), (2, 2)")
		require.NoError(t, err)
		clock := clockwork.NewFakeClock()
		src := sluicesql.Query[item](db, d, sluicesql.QueryOptions{
			Table: table, Key: []string{"id"}, Watermark: "version", PageSize: 10, Follow: time.Second, Clock: clock})
		f := startFollowing(t, src)
		require.Len(t, f.next(t, 2), 2)
		f.waiting(t, clock)
		_, err = db.Exec(fmt.Sprintf("INSERT INTO %s (id, version) VALUES (3, NULL), (4, 4)", table))
		require.NoError(t, err)
		clock.Advance(time.Second)
		got := f.next(t, 1)
		f.waiting(t, clock)
		require.True(t, f.p.Drain())
		_, err = f.run.Wait()
		var ke *sluicesql.KeyError
		assert.True(t, errorsAs(err, &ke) || (len(got) == 1 && got[0].ID == 3),
			"row 3 (NULL watermark) is read or fails the run; got %v, run error %v", got, err)
	})
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }
