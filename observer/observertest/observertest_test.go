package observertest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/observertest"
	"github.com/sluicehq/sluice/resilience"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNop(t *testing.T) {
	t.Parallel()
	observertest.Run(t, observertest.Subject{Observer: observer.Nop{}})
}

func TestCounter(t *testing.T) {
	t.Parallel()
	c := &observertest.Counter{}
	observertest.Run(t, observertest.Subject{
		Observer: c,
		Events:   observertest.AllEvents(),
		Counts:   func() (observertest.Counts, error) { return c.Counts(), nil },
	})
}

func TestMultiPassesEveryEventToEach(t *testing.T) {
	t.Parallel()
	first, second := &observertest.Counter{}, &observertest.Counter{}
	observertest.Run(t, observertest.Subject{
		Observer: observer.Multi(first, nil, observer.Nop{}, second),
		Events:   observertest.AllEvents(),
		Counts:   func() (observertest.Counts, error) { return second.Counts(), nil },
	})
	assert.Equal(t, first.Counts(), second.Counts())
}

func TestCountsOnlyAndAdd(t *testing.T) {
	t.Parallel()
	retry := observertest.Key{Event: observertest.Retry, Pipeline: "p", Node: "n", Detail: resilience.ItemRetry.String()}
	drop := observertest.Key{Event: observertest.Drop, Pipeline: "p", Node: "n"}
	c := observertest.Counts{}
	c.Add(retry, 2)
	c.Add(drop, 1)
	assert.Equal(t, observertest.Counts{retry: 2}, c.Only(observertest.Retry))
	c.Add(drop, -1)
	assert.Equal(t, observertest.Counts{retry: 2}, c, "a count that reaches zero is removed")
	assert.Equal(t, "retry{p/n item_retry}", retry.String())
	assert.Equal(t, "drop{p/n}", drop.String())
}
