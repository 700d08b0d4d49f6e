package resilience_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/resilience"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// optionFields returns the Field of every *OptionError joined in err, in
// order.
func optionFields(err error) []string {
	var fields []string
	var walk func(error)
	walk = func(err error) {
		var oe *resilience.OptionError
		if errors.As(err, &oe) && err == error(oe) {
			fields = append(fields, oe.Field)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return fields
}
