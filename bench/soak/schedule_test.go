package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScheduleIsDeterministicBySeed(t *testing.T) {
	a := schedule(7, time.Hour, 15*time.Second)
	b := schedule(7, time.Hour, 15*time.Second)
	require.NotEmpty(t, a)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, schedule(8, time.Hour, 15*time.Second), "another seed, another schedule")
}

func TestScheduleShape(t *testing.T) {
	const d, gap = time.Hour, 15 * time.Second
	s := schedule(1, d, gap)
	kinds := map[string]int{}
	prevEnd := time.Duration(0)
	for _, e := range s {
		kinds[e.Kind]++
		assert.GreaterOrEqual(t, e.At-prevEnd, gap, "a quiet gap before each fault")
		assert.Less(t, e.At, d*3/4, "the last quarter is quiet")
		assert.GreaterOrEqual(t, e.Lasts, time.Second)
		assert.Less(t, e.Lasts, 5*time.Second)
		prevEnd = e.At + e.Lasts
	}
	for _, k := range faultKinds {
		assert.NotZero(t, kinds[k], "an hour applies every kind of fault: %s", k)
	}
	assert.Empty(t, schedule(1, 10*time.Second, gap), "a run shorter than the gap has no fault")
	assert.Empty(t, schedule(1, time.Hour, 0))
}
