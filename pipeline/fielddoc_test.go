package pipeline_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/fielddoc"
)

// Every exported field of the package's option and result structs has a
// doc comment, saying what it does and what its zero value means.
func TestExportedFieldsAreDocumented(t *testing.T) {
	t.Parallel()
	missing, err := fielddoc.Undocumented(".",
		"LookupOptions", "HandOff", "Resume", "BuildError", "NodeError", "Result")
	require.NoError(t, err)
	assert.Empty(t, missing, "exported fields without a doc comment")
}
