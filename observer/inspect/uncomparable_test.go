package inspect_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/inspect"
)

type funcStats func() observer.Stats

func (f funcStats) Stats() observer.Stats { return f() }

// ForgetStats of a reader whose type cannot be compared (a func adapter)
// does not panic, and lets go of nothing it was not given.
func TestForgetUncomparableReaderDoesNotPanic(t *testing.T) {
	t.Parallel()
	in := inspect.New()
	assert.NoError(t, in.UseStats(funcStats(func() observer.Stats { return observer.Stats{Pipeline: "p"} })))
	assert.NotPanics(t, func() { in.ForgetStats(funcStats(func() observer.Stats { return observer.Stats{Pipeline: "q"} })) })
	assert.Error(t, in.UseStats(plainStats{}), "the first reader is still shown")
}
