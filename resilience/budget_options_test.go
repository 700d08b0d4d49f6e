package resilience_test

import (
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

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

// A Window under budgetBuckets nanoseconds is invalid (Validate says so),
// but a Budget made with one and used without validation refuses or
// allows as any other: its first Withdraw divided by zero (a review's
// finding). A negative Window too.
func TestBudgetWithATinyWindowDoesNotPanic(t *testing.T) {
	t.Parallel()
	for _, w := range []time.Duration{time.Nanosecond, 9 * time.Nanosecond, -time.Second} {
		b := resilience.NewBudget(resilience.BudgetOptions{MinPerSecond: 1, Window: w, Clock: clockwork.NewFakeClock()})
		assert.NotPanics(t, func() { b.Withdraw() }, "Window %v", w)
	}
}
