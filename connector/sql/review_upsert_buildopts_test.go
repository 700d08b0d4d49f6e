package sql_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Review finding 6: STYLE.md practice 2 says configuration errors surface
// at Build, all of them, joined, naming node and field, and a panic is
// only for "programmer misuse that no input can cause". Upsert's options
// are input (a table name, a batch size from a config file): a Table left
// empty, or a negative BatchSize, panics out of the graph's construction
// instead, before Build can join it with the other nodes' errors.
func TestReviewUpsertBadOptionsSurfaceAtBuild(t *testing.T) {
	db := openSQLite(t)
	b := pipeline.New("upsert-options")
	in := pipeline.Source(b, "read", pipelinetest.NewSliceSource[product]())
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		sluicesql.Upsert(b, "store", in, db, sluicesql.SQLite, sluicesql.UpsertOptions{Table: "", BatchSize: -1})
	}()
	require.Nil(t, panicked, "options from a config file are not a programmer's misuse")
	_, err := b.Build()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	assert.Contains(t, err.Error(), `node "store"`)
	assert.Contains(t, err.Error(), "Table")
	assert.Contains(t, err.Error(), "BatchSize")
}
