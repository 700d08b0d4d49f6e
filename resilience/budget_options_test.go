package resilience_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

// A budget built from bad options is reported by Validate as one
// OptionError per field, under RetryBudget, with the field's value: not
// as "RetryBudget = :" followed by the budget's own text.
func TestBudgetOptionErrorsNameTheField(t *testing.T) {
	t.Parallel()
	o := resilience.Options{RetryBudget: resilience.NewBudget(resilience.BudgetOptions{
		Ratio: -1, MinPerSecond: math.NaN(), Window: time.Nanosecond})}
	err := o.Validate()
	require.ErrorIs(t, err, resilience.ErrInvalidOptions)
	assert.Equal(t, []string{"RetryBudget.Ratio", "RetryBudget.MinPerSecond", "RetryBudget.Window"}, optionFields(err))
	assert.Contains(t, err.Error(), "resilience: RetryBudget.Ratio = -1: must be a finite number, at least 0")
	assert.Contains(t, err.Error(), "resilience: RetryBudget.MinPerSecond = NaN: must be a finite number, at least 0")
	assert.Contains(t, err.Error(), "resilience: RetryBudget.Window = 1ns: must be at least 10ns")
	assert.NotContains(t, err.Error(), "= :")

	ok := resilience.Options{RetryBudget: resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1})}
	assert.NoError(t, ok.Validate(), "a zero Window takes the default")
}
