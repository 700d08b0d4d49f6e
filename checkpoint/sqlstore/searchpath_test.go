package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/checkpoint/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// inSchema returns a connection to PostgreSQL whose search_path is a new
// schema of its own, then public, as the docs say to put the table in a
// schema.
func inSchema(t *testing.T, admin *sql.DB) (*sql.DB, string) {
	t.Helper()
	ctx := context.Background()
	schema := fmt.Sprintf("ck_app_%d", time.Now().UnixNano()%1e12)
	_, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	dsn := servicetest.Postgres(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", dsn+sep+"search_path="+schema+",public")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db, schema
}

// A store whose connection's search_path is "app,public", beside a table
// of the same name in public (another job's): it makes and uses the table
// in app, where CREATE TABLE puts it. It looked the table up with
// to_regclass, which searches the whole path, found public's, and loaded
// the other job's position (a review's finding).
func TestStoreInASchemaLeavesPublicsTable(t *testing.T) {
	pub := openPostgres(t)
	ctx := context.Background()
	table := uniqueTable(t, pub)
	other := newStore(t, pub, sqlstore.Postgres, table)
	require.NoError(t, other.Save(ctx, "orders", "read", []byte("public-job")))

	app, schema := inSchema(t, pub)
	mine := newStore(t, app, sqlstore.Postgres, table)
	pos, err := mine.Load(ctx, "orders", "read")
	require.NoError(t, err)
	assert.Nil(t, pos, "the store in schema %s loaded public's position %q", schema, pos)
	require.NoError(t, mine.Save(ctx, "orders", "read", []byte("app-job")))
	var n int
	require.NoError(t, pub.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`."`+table+`"`).Scan(&n))
	assert.Equal(t, 1, n, "the position is in %s's own table", schema)
	pos, err = other.Load(ctx, "orders", "read")
	require.NoError(t, err)
	assert.Equal(t, "public-job", string(pos), "public's position is untouched")
}
