package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the SQLite driver, registered as "sqlite"

	"github.com/sluicehq/sluice/checkpoint/sqlstore"
)

// openStore opens the SQLite database at path, with a busy timeout so
// that concurrent writers wait for its lock, and a Store in it; the table
// is made on first use.
func openStore(path string) (*sql.DB, *sqlstore.Store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, store, nil
}

// A Store keeps each source's position in a row of a SQL table, so that
// the next run, here after the program restarted, resumes from it. SQLite
// keeps the positions beside a pipeline's own data; PostgreSQL
// (sqlstore.Postgres, with the pgx driver's database/sql adapter) serves a
// pipeline that moves between machines.
func Example() {
	dir, err := os.MkdirTemp("", "checkpoint-sqlstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "checkpoints.db")
	ctx := context.Background()

	db, store, err := openStore(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = store.Save(ctx, "orders", "read", []byte("offset=1024"))
	db.Close()
	if err != nil {
		fmt.Println(err)
		return
	}

	// The program restarts.
	db, store, err = openStore(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	pos, err := store.Load(ctx, "orders", "read")
	fmt.Printf("%s %v\n", pos, err)
	var n int
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM "+store.Table()).Scan(&n)
	fmt.Println(store.Table(), n, err)
	// Output:
	// offset=1024 <nil>
	// sluice_checkpoints 1 <nil>
}
