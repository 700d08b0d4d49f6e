package resilience_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/fielddoc"
)

// Every exported field of the options and of the values the package hands
// out has a doc comment: godoc is where a user looks up what a setting
// does and what its zero value means.
func TestExportedFieldsAreDocumented(t *testing.T) {
	t.Parallel()
	missing, err := fielddoc.Undocumented(".",
		"Options", "ItemRetryOptions", "NodeRestartOptions", "NodeRetryOptions",
		"CircuitBreakerOptions", "BudgetOptions", "FailureRule", "Backoff",
		"Transition", "RetryExhaustedError", "PanicError", "CircuitOpenError",
		"OptionError", "AttemptTimeoutError")
	require.NoError(t, err)
	assert.Empty(t, missing, "exported fields without a doc comment")
}
