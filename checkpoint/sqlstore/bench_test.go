package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// BenchmarkSave measures a Save of a new position: one upsert, committed.
// SQLite runs in WAL mode with its default synchronous setting (FULL).
func BenchmarkSave(b *testing.B) {
	run := func(b *testing.B, db *sql.DB, d sqlstore.Dialect, table string) {
		s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
		require.NoError(b, err)
		ctx := context.Background()
		n := 0
		for b.Loop() {
			n++
			if err := s.Save(ctx, "orders", "read", fmt.Appendf(nil, "offset=%026d", n)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("sqlite", func(b *testing.B) {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "c.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
		require.NoError(b, err)
		defer db.Close()
		run(b, db, sqlstore.SQLite, sqlstore.DefaultTable)
	})
	b.Run("postgres", func(b *testing.B) {
		db, err := sql.Open("pgx", servicetest.Postgres(b))
		require.NoError(b, err)
		defer db.Close()
		table := "sluice_ckpt_bench"
		_, _ = db.Exec("DROP TABLE IF EXISTS " + table)
		defer func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) }()
		run(b, db, sqlstore.Postgres, table)
	})
}
