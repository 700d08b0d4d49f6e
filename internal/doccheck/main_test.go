package doccheck_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The Examples run pipelines, whose goroutines must all be gone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
