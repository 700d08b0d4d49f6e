package assert

import "time"

// Eventually checks that condition returns true within waitFor, calling
// it at once and then every tick on the real clock while it returns
// false. Unlike testify's, it calls condition on the caller's goroutine,
// so that no call outlives the check (goleak) and calls never overlap. A
// call that returns true only after waitFor has passed fails the check, as
// testify's does (there the verdict comes at waitFor).
func Eventually(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) bool {
	if h, ok := t.(tHelper); ok {
		h.Helper()
	}
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	start := time.Now()
	for {
		if condition() {
			if time.Since(start) > waitFor {
				return Fail(t, "Condition satisfied only after waitFor", msgAndArgs...)
			}
			return true
		}
		select {
		case <-deadline.C:
			return Fail(t, "Condition never satisfied", msgAndArgs...)
		case <-ticker.C:
		}
	}
}
