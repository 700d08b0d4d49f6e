package storetest_test

import (
	"testing"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/storetest"
)

// Run checks a Store against the contract of idempotency.Store, here the
// memory store; a store of one's own is checked the same way, keeping
// completed keys for storetest.Retention. Run needs a *testing.T, so this
// example is compiled but not run: the function below is a test of the
// store's package.
func ExampleRun() {
	testConformance := func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) idempotency.Store {
			return idempotency.NewMemory(idempotency.WithRetention(storetest.Retention))
		})
	}
	_ = testConformance
}
