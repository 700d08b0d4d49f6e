package resilience_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/fielddoc"
	"github.com/sluicehq/sluice/internal/require"
)

// Every exported field of every exported struct of the package, the
// options and the values it hands out, has a doc comment: godoc is where a
// user looks up what a setting does and what its zero value means. The
// structs are found, not listed, so a new one cannot escape the check.
func TestExportedFieldsAreDocumented(t *testing.T) {
	t.Parallel()
	types, err := fielddoc.Structs(".")
	require.NoError(t, err)
	require.NotEmpty(t, types)
	missing, err := fielddoc.Undocumented(".", types...)
	require.NoError(t, err)
	assert.Empty(t, missing, "exported fields without a doc comment")
}
