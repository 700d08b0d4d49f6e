package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/resilience"
)

func TestMarkBlameless(t *testing.T) {
	t.Parallel()
	errBusy := errors.New("busy")
	assert.NoError(t, resilience.MarkBlameless(nil))
	marked := resilience.MarkBlameless(errBusy)
	assert.ErrorIs(t, marked, errBusy, "the mark unwraps")
	assert.Equal(t, "busy", marked.Error())
	assert.True(t, resilience.IsBlameless(fmt.Errorf("write: %w", marked)), "found when wrapped")
	assert.True(t, resilience.IsBlameless(&resilience.RetryExhaustedError{Err: marked}), "through the retries that ran out")
	assert.True(t, resilience.IsBlameless(fmt.Errorf("pool: %w", context.Canceled)), "a cancellation")
	assert.False(t, resilience.IsBlameless(errBusy))
	assert.False(t, resilience.IsBlameless(context.DeadlineExceeded), "a timeout may be the item's own slowness")
	assert.False(t, resilience.IsBlameless(nil))
	assert.False(t, resilience.IsTransient(marked), "the mark changes no classification")
	assert.True(t, resilience.IsTransient(resilience.MarkBlameless(resilience.MarkTransient(errBusy))))
}

// An error is blameless only when every error in its tree is: one that is
// the item's own makes the whole its fault.
func TestIsBlamelessOnlyWhenEveryBranchIs(t *testing.T) {
	t.Parallel()
	errBad := resilience.MarkPermanent(errors.New("bad row"))
	busy := resilience.MarkBlameless(errors.New("busy"))
	assert.False(t, resilience.IsBlameless(errors.Join(errBad, context.Canceled)), "poison joined with a sibling's cancellation")
	assert.False(t, resilience.IsBlameless(fmt.Errorf("%w: %w", context.Canceled, errBad)), "two causes, one the item's")
	assert.False(t, resilience.IsBlameless(errors.Join(busy, errBad)), "poison joined with a busy sibling")
	assert.True(t, resilience.IsBlameless(errors.Join(context.Canceled, fmt.Errorf("part: %w", context.Canceled))), "only cancellations")
	assert.True(t, resilience.IsBlameless(errors.Join(busy, nil, context.Canceled)), "only blameless parts")
	assert.True(t, resilience.IsBlameless(resilience.MarkBlameless(errors.Join(errBad, context.Canceled))), "marked as a whole")
	assert.False(t, resilience.IsBlameless(errors.Join(nil, nil)))
}
