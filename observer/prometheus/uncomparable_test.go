package prometheus_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/prometheus"
)

// A reader whose type cannot be compared (a func adapter) gets
// UseStats's error for a second pipeline of its name, and ForgetStats
// passes it by, where both panicked comparing it.
func TestUncomparableReaderIsRefusedNotPanicked(t *testing.T) {
	t.Parallel()
	c := prometheus.New()
	reader := func(name string) statsFunc {
		return func() observer.Stats { return observer.Stats{Pipeline: name} }
	}
	assert.NoError(t, c.UseStats(reader("orders")))
	assert.NotPanics(t, func() {
		assert.ErrorContains(t, c.UseStats(reader("orders")), `a pipeline named "orders" is already observed`)
	}, "UseStats")
	assert.NotPanics(t, func() { c.ForgetStats(reader("payments")) }, "ForgetStats")
}
