package pipeline

import (
	"fmt"
	"reflect"

	"github.com/sluicehq/sluice/resilience"
)

// breakerSetButOff returns an error for each field of a breaker that is
// off (Enabled false) and that a user set: changed from before, the
// options it started from, to a value other than zero and other than the
// profile's default, def. Such a setting does nothing, which a reader of
// the code would not guess; the defaults every node starts from, themselves
// set but off, are no such setting, nor is a node's reset to them. by
// names the option that made the setting, when it is not the node's own.
func breakerSetButOff(before, after, def resilience.CircuitBreakerOptions, by string) []error {
	if after.Enabled {
		return nil
	}
	var errs []error
	b, a, d := reflect.ValueOf(before), reflect.ValueOf(after), reflect.ValueOf(def)
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if f.Name == "Enabled" || a.Field(i).IsZero() || a.Field(i).Equal(b.Field(i)) || a.Field(i).Equal(d.Field(i)) {
			continue
		}
		reason := "set, but CircuitBreaker.Enabled is false, so the breaker is off and the setting does nothing: set Enabled to true to turn it on"
		if by != "" {
			reason = fmt.Sprintf("set by %s, but no node sets CircuitBreaker.Enabled to true, so no breaker is on and the setting does nothing", by)
		}
		errs = append(errs, &resilience.OptionError{Field: "CircuitBreaker." + f.Name, Value: a.Field(i).Interface(), Reason: reason})
	}
	return errs
}
