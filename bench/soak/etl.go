package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/sluicehq/sluice/connector/file"
	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A row is an order as the ETL cycle's table holds it.
type row struct {
	ID     int64  `db:"id,key"`
	Cycle  int64  `db:"cycle"`
	Amount int64  `db:"amount"`
	Note   string `db:"note"`
}

// etlCycle is one run of the ETL pipeline in dir: it writes rows orders
// to a CSV file (every malformedEvery-th malformed, 0: none), reads them
// with file.CSV, parses them (a malformed one is dead-lettered), calls the
// flaky dependency, and upserts them into a SQLite table. It returns the
// cycle's books: the rows written in, those in the table out, the
// dead-lettered, and the calls past the dependency beyond an item's first
// (duplicates, which no step of this pipeline should make).
func etlCycle(ctx context.Context, dir string, cycle, rows, malformedEvery int, fl *flaky) (account, error) {
	a := account{pipeline: "etl"}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return a, err
	}
	csvPath := filepath.Join(dir, "orders.csv")
	var sb strings.Builder
	sb.WriteString("id,amount,note\n")
	for i := range rows {
		if malformedEvery > 0 && i%malformedEvery == malformedEvery-1 {
			fmt.Fprintf(&sb, "%d,not-a-number,malformed\n", i)
			continue
		}
		fmt.Fprintf(&sb, "%d,%d,order %d of cycle %d\n", i, 1+i%97, i, cycle)
	}
	if err := os.WriteFile(csvPath, []byte(sb.String()), 0o644); err != nil {
		return a, err
	}
	dbPath := filepath.Join(dir, "orders.db")
	_ = os.Remove(dbPath)
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return a, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, cycle INTEGER NOT NULL, amount INTEGER NOT NULL, note TEXT NOT NULL)`); err != nil {
		return a, fmt.Errorf("etl: create table: %w", err)
	}

	deadIDs := map[int]int{} // dead letters by row id; -1: not a row read
	dlq := deadletter.Func(func(_ context.Context, e deadletter.Envelope) error {
		id := -1
		if r, ok := e.Item.(file.Record); ok {
			if n, err := strconv.Atoi(r.Get("id")); err == nil {
				id = n
			}
		}
		deadIDs[id]++ // the engine writes dead letters one at a time
		return nil
	})
	calls := map[int64]int{}
	b := pipeline.New("soak-etl", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(fl.retries))
	recs := pipeline.Source(b, "read", file.CSV(csvPath, file.CSVOptions{Header: true}))
	parsed := pipeline.Map(b, "parse", recs, func(_ context.Context, r file.Record) (row, error) {
		id, err1 := strconv.ParseInt(r.Get("id"), 10, 64)
		amount, err2 := strconv.ParseInt(r.Get("amount"), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return row{}, resilience.MarkPermanent(fmt.Errorf("line %d: %w", r.Line, err))
		}
		return row{ID: id, Cycle: int64(cycle), Amount: amount, Note: r.Get("note")}, nil
	})
	checked := pipeline.Map(b, "dependency", parsed, func(ctx context.Context, r row) (row, error) {
		// The poison items of this pipeline are its malformed rows: the
		// dependency's own poison ids are the broker pipeline's.
		if _, err := fl.callGood(ctx, int(r.ID)); err != nil {
			return row{}, err
		}
		calls[r.ID]++ // one worker: no lock needed
		return r, nil
	})
	sluicesql.Upsert(b, "load", checked, db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "orders"})
	p, err := b.Build()
	if err != nil {
		return a, err
	}
	res, err := p.Run(ctx)
	_ = res
	if err != nil {
		return a, fmt.Errorf("etl cycle %d: %w", cycle, err)
	}
	// The books by id: the table's ids, each once (its primary key), and
	// the dead letters' ids; a good row missing from the table is lost
	// even when a repeated dead letter would make the counts balance.
	stored := map[int]bool{}
	ids, err := db.QueryContext(ctx, `SELECT id FROM orders WHERE cycle = ?`, cycle)
	if err != nil {
		return a, fmt.Errorf("etl: read ids: %w", err)
	}
	for ids.Next() {
		var id int
		if err := ids.Scan(&id); err != nil {
			ids.Close()
			return a, fmt.Errorf("etl: read ids: %w", err)
		}
		stored[id] = true
	}
	if err := ids.Err(); err != nil {
		return a, fmt.Errorf("etl: read ids: %w", err)
	}
	ids.Close()
	a = etlBooks(rows, malformedEvery, stored, deadIDs)
	for _, n := range calls {
		a.duplicates += n - 1
	}
	return a, nil
}

// etlBooks closes one cycle's books by id: rows written in (ids 0 …
// rows-1, every malformedEvery-th malformed), the ids stored in the table, and the dead letters by id (-1:
// a dead letter that is not a row read). A good row missing from the
// table is lost even when a repeated dead letter makes the counts
// balance; a repeated dead letter is counted (deadRepeats).
func etlBooks(rows, malformedEvery int, stored map[int]bool, deadIDs map[int]int) account {
	a := account{pipeline: "etl"}
	a.in = rows
	for id := range stored {
		if id < 0 || id >= rows {
			a.strays++
			continue
		}
		a.out++
	}
	for id, n := range deadIDs {
		a.deadRepeats += n - 1
		switch {
		case id == -1:
			a.wrongDead++ // a dead letter that is not a row read
		case id >= rows:
			a.strays++
		default:
			a.dead++
			if stored[id] {
				a.both++
			}
		}
	}
	// The dead-lettered must be exactly the malformed rows, by id.
	for id := range rows {
		if malformed := malformedEvery > 0 && id%malformedEvery == malformedEvery-1; malformed != (deadIDs[id] > 0) {
			a.wrongDead++
		}
	}
	return a
}

// add adds b's counts to a's.
func (a *account) add(b account) {
	a.in += b.in
	a.out += b.out
	a.dead += b.dead
	a.both += b.both
	a.strays += b.strays
	a.wrongDead += b.wrongDead
	a.duplicates += b.duplicates
	a.deadRepeats += b.deadRepeats
}

// etlLoop runs ETL cycles in dir until ctx ends, and returns their books
// added up and how many cycles ran.
func etlLoop(ctx context.Context, dir string, rows int, fl *flaky, logf func(string, ...any)) (account, int, error) {
	total := account{pipeline: "etl"}
	cycles := 0
	for ctx.Err() == nil {
		a, err := etlCycle(context.WithoutCancel(ctx), filepath.Join(dir, "etl"), cycles, rows, 50, fl)
		if err != nil {
			return total, cycles, err
		}
		total.add(a)
		cycles++
		if p := a.problems(); len(p) > 0 {
			logf("etl cycle %d: %s", cycles, strings.Join(p, "; "))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return total, cycles, nil
}
