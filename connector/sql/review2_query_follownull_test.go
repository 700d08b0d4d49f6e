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
//
// Fixed: a following source looks for NULL at each poll (the count
// Open makes, one query, served by the columns' index) and fails the
// run with a KeyError at the poll that finds one.
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
		// The poll looks for NULL before its first page: the run fails
		// there, before row 4 is emitted and its position passes row 3.
		// (The review's version waited for one more item and a next
		// poll, which a run that fails at this poll never gives.)
		guard := time.NewTimer(10 * time.Second)
		defer guard.Stop()
		select {
		case <-f.run.Done():
		case item := <-f.items:
			t.Fatalf("row %d emitted: the poll did not look for NULL first", item.ID)
		case <-guard.C:
			t.Fatal("the run did not end 10 s after the poll")
		}
		_, err = f.run.Wait()
		var ke *sluicesql.KeyError
		require.True(t, errorsAs(err, &ke), "row 3 (NULL watermark) fails the run; run error %v", err)
		assert.ErrorIs(t, err, sluicesql.ErrKey)
		assert.Contains(t, ke.Error(), `"version"`, "the error names the watermark column")
		assert.Empty(t, f.items, "no row after the NULL one is emitted")
	})
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }
