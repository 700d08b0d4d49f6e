package otel_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/observer"
)

// A reader whose type cannot be compared (a func adapter) gets
// UseStats's error for a second pipeline of its name, and ForgetStats
// passes it by, where both panicked comparing it (a review's finding).
func TestUncomparableReaderIsRefusedNotPanicked(t *testing.T) {
	t.Parallel()
	o, _ := newObserver(t)
	nodes := []observer.NodeStats{{Node: "read", Kind: observer.KindSource}}
	reader := func(name string) statsFunc {
		return func() observer.Stats { return observer.Stats{Pipeline: name, Nodes: nodes} }
	}
	assert.NoError(t, o.UseStats(reader("orders")))
	assert.NotPanics(t, func() {
		assert.ErrorContains(t, o.UseStats(reader("orders")), `a pipeline named "orders" is already observed`)
	}, "UseStats")
	assert.NotPanics(t, func() { o.ForgetStats(reader("payments")) }, "ForgetStats")
}
