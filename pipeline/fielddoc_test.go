package pipeline_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/fielddoc"
	"github.com/sluicehq/sluice/internal/require"
)

// Every exported field of every exported struct of the package (options,
// results, errors, plans, graphs) has a doc comment, saying what it does
// and what its zero value means. The structs are found, not listed, so a
// new one cannot escape the check.
func TestExportedFieldsAreDocumented(t *testing.T) {
	t.Parallel()
	types, err := fielddoc.Structs(".")
	require.NoError(t, err)
	require.NotEmpty(t, types)
	missing, err := fielddoc.Undocumented(".", types...)
	require.NoError(t, err)
	assert.Empty(t, missing, "exported fields without a doc comment")
}
