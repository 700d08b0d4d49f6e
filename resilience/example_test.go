package resilience_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

func ExampleBackoff_DelayFor() {
	b := resilience.Exponential(100 * time.Millisecond).
		WithMaxDelay(500 * time.Millisecond).
		WithJitter(resilience.JitterNone)
	for n := 1; n <= 5; n++ {
		fmt.Printf("retry %d waits %s\n", n, b.DelayFor(n))
	}
	// Output:
	// retry 1 waits 100ms
	// retry 2 waits 200ms
	// retry 3 waits 400ms
	// retry 4 waits 500ms
	// retry 5 waits 500ms
}

func ExampleBackoff_DelayForRand() {
	// A seeded source makes jittered delays repeatable, in tests and in
	// pipelines (pipeline.WithRand).
	b := resilience.Exponential(time.Second).WithJitter(resilience.JitterEqual)
	r := rand.New(rand.NewPCG(1, 1))
	for n := 1; n <= 3; n++ {
		d := b.DelayForRand(n, r)
		fmt.Printf("retry %d: between %s and %s: %t\n", n, b.Nominal(n)/2, b.Nominal(n), d >= b.Nominal(n)/2 && d <= b.Nominal(n))
	}
	// Output:
	// retry 1: between 500ms and 1s: true
	// retry 2: between 1s and 2s: true
	// retry 3: between 2s and 4s: true
}

// httpError is what an HTTP client might return.
type httpError struct{ code int }

func (e *httpError) Error() string   { return fmt.Sprintf("http status %d", e.code) }
func (e *httpError) StatusCode() int { return e.code }

func ExampleClassifier() {
	errQuota := errors.New("quota exceeded")

	c := resilience.Classifier{}. // the zero value holds the default rules
					TransientIs(errQuota).            // our API's quota resets within a minute
					PermanentIs(syscall.ECONNREFUSED) // this service never comes back by itself
	// A conflict is worth retrying; every other 4xx is not.
	c = resilience.TransientAs(c, func(e *httpError) bool { return e.code == 409 })

	for _, err := range []error{
		fmt.Errorf("charge: %w", errQuota),
		syscall.ECONNREFUSED,
		syscall.ECONNRESET,
		&httpError{409},
		&httpError{503},
		&httpError{404},
		errors.New("invalid card number"),
	} {
		fmt.Printf("%-24s transient=%t\n", err, c.IsTransient(err))
	}
	// Output:
	// charge: quota exceeded   transient=true
	// connection refused       transient=false
	// connection reset by peer transient=true
	// http status 409          transient=true
	// http status 503          transient=true
	// http status 404          transient=false
	// invalid card number      transient=false
}
