package observer_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
)

// counting counts the events and stats it is handed.
type counting struct {
	observer.Nop
	retries, exhausted int
	using              []observer.StatsReader
	panicOnForget      bool
	refuse             bool
}

func (c *counting) OnRetry(observer.RetryEvent)                   { c.retries++ }
func (c *counting) OnRetryExhausted(observer.RetryExhaustedEvent) { c.exhausted++ }
func (c *counting) UseStats(r observer.StatsReader) error {
	if c.refuse {
		return errors.New("refused")
	}
	c.using = append(c.using, r)
	return nil
}

func (c *counting) ForgetStats(r observer.StatsReader) {
	for i, u := range c.using {
		if u == r {
			c.using = append(c.using[:i], c.using[i+1:]...)
			break
		}
	}
	if c.panicOnForget {
		panic("forget")
	}
}

type reader struct{ _ int } // not of size zero: two are two

func (*reader) Stats() observer.Stats { return observer.Stats{} }

// uncomparable cannot be compared with ==: Multi must not panic on it.
type uncomparable struct {
	f func()
	n *int
}

func (u uncomparable) OnNodeStarted(observer.NodeEvent)              {}
func (u uncomparable) OnNodeCompleted(observer.NodeEvent)            {}
func (u uncomparable) OnRetry(observer.RetryEvent)                   { *u.n++ }
func (u uncomparable) OnRetryExhausted(observer.RetryExhaustedEvent) {}
func (u uncomparable) OnDeadLetter(observer.DeadLetterEvent)         {}
func (u uncomparable) OnDrop(observer.DropEvent)                     {}
func (u uncomparable) OnCircuitStateChanged(observer.CircuitEvent)   {}

// byValue is comparable: two equal values are one observer.
type byValue struct {
	observer.Nop
	n *int
}

func (v byValue) OnRetry(observer.RetryEvent) { *v.n++ }

// An observer given to Multi twice, or in a Multi given to Multi, gets
// each event and each pipeline's counters once: a metrics plug-in listed
// twice counted each event twice (a review's finding).
func TestMultiPassesEachEventOnceToAnObserverGivenTwice(t *testing.T) {
	c, d := &counting{}, &counting{}
	m := observer.Multi(c, observer.Multi(c, d), nil, d, observer.Multi(observer.Multi(c)))
	m.OnRetry(observer.RetryEvent{})
	m.OnRetryExhausted(observer.RetryExhaustedEvent{})
	assert.Equal(t, 1, c.retries)
	assert.Equal(t, 1, c.exhausted)
	assert.Equal(t, 1, d.retries)
	r := &reader{}
	require.NoError(t, m.(observer.StatsUser).UseStats(r))
	assert.Len(t, c.using, 1)
	assert.Len(t, d.using, 1)

	// Two equal values of a comparable type are one observer;
	// uncomparable ones are each kept, and Multi does not panic.
	var byVal, uncomp int
	v := byValue{n: &byVal}
	u := uncomparable{f: func() {}, n: &uncomp}
	m = observer.Multi(v, u, v, u, observer.Multi(v, u))
	m.OnRetry(observer.RetryEvent{})
	assert.Equal(t, 1, byVal)
	assert.Equal(t, 3, uncomp, "an observer that cannot be compared is never taken for another")
}

// When one observer refuses a pipeline, those that took it forget it,
// though one of them panics in ForgetStats.
func TestMultiForgetsThoughOneForgetterPanics(t *testing.T) {
	first, second := &counting{panicOnForget: true}, &counting{}
	m := observer.Multi(first, second, &counting{refuse: true})
	r := &reader{}
	err := m.(observer.StatsUser).UseStats(r)
	require.Error(t, err)
	assert.ErrorContains(t, err, "refused")
	assert.ErrorContains(t, err, "ForgetStats panicked: forget")
	assert.Empty(t, first.using)
	assert.Empty(t, second.using, "the forgetter after the one that panicked forgot the pipeline too")

	// ForgetStats itself goes on past the panic, then panics with it.
	first, second = &counting{panicOnForget: true}, &counting{}
	m = observer.Multi(first, second)
	require.NoError(t, m.(observer.StatsUser).UseStats(r))
	assert.Panics(t, func() { m.(observer.StatsForgetter).ForgetStats(r) })
	assert.Empty(t, second.using)
}

var zeroTicks int

type zeroSize struct{ observer.Nop }

func (*zeroSize) OnRetry(observer.RetryEvent) { zeroTicks++ }

// Two observers made apart are two, though Go gives pointers to a type of
// size zero one address (a second review's finding).
func TestMultiKeepsTwoZeroSizeObservers(t *testing.T) {
	a, b := new(zeroSize), new(zeroSize)
	zeroTicks = 0
	observer.Multi(a, b).OnRetry(observer.RetryEvent{})
	assert.Equal(t, 2, zeroTicks)
}

// Multi leaves out a nil pointer held in an Observer, as a program passes
// an observer it builds only when configured: it panicked at every event,
// and the observers after it never got the event (a review's finding).
func TestMultiLeavesOutANilPointer(t *testing.T) {
	t.Parallel()
	var logs *counting // not configured
	c := &counting{}
	m := observer.Multi(logs, c)
	assert.NotPanics(t, func() { m.OnRetry(observer.RetryEvent{}) })
	assert.Equal(t, 1, c.retries)
}
