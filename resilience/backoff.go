package resilience

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// BackoffKind selects the curve of a [Backoff].
type BackoffKind int

const (
	// BackoffNone waits nothing. It is the zero value.
	BackoffNone BackoffKind = iota
	// BackoffConstant waits Base before every retry.
	BackoffConstant
	// BackoffLinear waits Base × n before retry n.
	BackoffLinear
	// BackoffExponential waits Base × Factor^(n−1) before retry n.
	BackoffExponential
	// BackoffCustom waits Custom(n) before retry n.
	BackoffCustom
)

// String returns the kind's name in lower case.
func (k BackoffKind) String() string {
	switch k {
	case BackoffNone:
		return "none"
	case BackoffConstant:
		return "constant"
	case BackoffLinear:
		return "linear"
	case BackoffExponential:
		return "exponential"
	case BackoffCustom:
		return "custom"
	default:
		return fmt.Sprintf("BackoffKind(%d)", int(k))
	}
}

// Jitter selects how a delay is randomised so that many clients that failed
// together do not retry together.
type Jitter int

const (
	// JitterNone keeps the delay as the curve gives it. It is the zero value.
	JitterNone Jitter = iota
	// JitterFull draws the delay uniformly from [0, d].
	JitterFull
	// JitterEqual keeps half the delay and draws the other half:
	// d/2 + uniform in [0, d/2].
	JitterEqual
)

// String returns the jitter's name in lower case.
func (j Jitter) String() string {
	switch j {
	case JitterNone:
		return "none"
	case JitterFull:
		return "full"
	case JitterEqual:
		return "equal"
	default:
		return fmt.Sprintf("Jitter(%d)", int(j))
	}
}

// MaxDuration is the longest delay a [Backoff] returns: curves that grow
// past it saturate here instead of overflowing.
const MaxDuration = time.Duration(math.MaxInt64)

// A Backoff says how long to wait before each retry. It is a value: the With
// methods return changed copies, so one Backoff can be shared freely.
//
// The zero Backoff waits nothing before any retry.
//
// The delay before retry n (n counts from 1) is computed in three steps:
// the curve of Kind gives the nominal delay, saturating at [MaxDuration]
// instead of overflowing and counting a negative or NaN result as 0; a
// MaxDelay above 0 caps it; then Jitter spreads it within [0, capped delay].
// Jitter therefore never makes a delay exceed MaxDelay, and delays that sit
// at the cap still spread, which is what keeps a crowd of clients from
// retrying in step when a dependency stays down.
type Backoff struct {
	// Kind is the shape of the curve; the zero value, BackoffNone, waits
	// nothing.
	Kind BackoffKind
	// Base is the first delay, or the step of a linear curve; 0 gives
	// delays of 0.
	Base time.Duration
	// Factor is the growth of an exponential curve, at least 1 for one;
	// other curves leave it 0.
	Factor float64
	// MaxDelay is the cap of every delay; 0 means no cap.
	MaxDelay time.Duration
	// Jitter spreads each delay at random; the zero value, JitterNone,
	// keeps it exact.
	Jitter Jitter
	// Custom gives the delay before retry n for [BackoffCustom]. It must be
	// safe for concurrent use. Its result is capped but never jittered.
	Custom func(retry int) time.Duration
}

// NoBackoff returns a Backoff that retries at once. It equals the zero value.
func NoBackoff() Backoff { return Backoff{} }

// Constant returns a Backoff that waits d before every retry, without jitter.
func Constant(d time.Duration) Backoff {
	return Backoff{Kind: BackoffConstant, Base: d}
}

// Linear returns a Backoff that waits step × n before retry n, with equal
// jitter.
func Linear(step time.Duration) Backoff {
	return Backoff{Kind: BackoffLinear, Base: step, Jitter: JitterEqual}
}

// Exponential returns a Backoff that waits base × 2^(n−1) before retry n,
// with full jitter. Change the factor with [Backoff.WithFactor].
func Exponential(base time.Duration) Backoff {
	return Backoff{Kind: BackoffExponential, Base: base, Factor: 2, Jitter: JitterFull}
}

// Custom returns a Backoff that waits f(n) before retry n. The result is
// capped by MaxDelay if one is set, and never jittered: f owns its curve.
func Custom(f func(retry int) time.Duration) Backoff {
	return Backoff{Kind: BackoffCustom, Custom: f}
}

// WithFactor returns a copy of b with the growth factor set.
func (b Backoff) WithFactor(f float64) Backoff { b.Factor = f; return b }

// WithMaxDelay returns a copy of b whose delays never exceed d.
func (b Backoff) WithMaxDelay(d time.Duration) Backoff { b.MaxDelay = d; return b }

// WithJitter returns a copy of b with the jitter set.
func (b Backoff) WithJitter(j Jitter) Backoff { b.Jitter = j; return b }

// A Rand is a source of uniform random numbers. A *[rand.Rand] satisfies
// it; so does a seeded one, which makes jittered delays repeatable. A Rand
// given to [Backoff.DelayForRand] is used by one goroutine at a time.
type Rand interface {
	// Int64N returns a number in [0, n); n is above 0.
	Int64N(n int64) int64
}

// globalRand draws from math/rand/v2's top-level source, which is safe for
// concurrent use.
type globalRand struct{}

func (globalRand) Int64N(n int64) int64 { return rand.Int64N(n) }

// DelayFor returns the delay before retry n (n counts from 1), jittered
// with math/rand/v2's global source. A retry number below 1 waits nothing.
func (b Backoff) DelayFor(n int) time.Duration { return b.DelayForRand(n, nil) }

// DelayForRand is [Backoff.DelayFor] drawing jitter from r; a nil r uses
// math/rand/v2's global source.
func (b Backoff) DelayForRand(n int, r Rand) time.Duration {
	d := b.Nominal(n)
	if d <= 0 || b.Kind == BackoffCustom {
		return d
	}
	if r == nil {
		r = globalRand{}
	}
	switch b.Jitter {
	case JitterFull:
		d = uniform(r, d)
	case JitterEqual:
		half := d / 2
		d = half + uniform(r, d-half)
	}
	// The cap was applied to the nominal delay and jitter only shrinks it;
	// capping again keeps the promise even if a jitter is added that grows.
	if b.MaxDelay > 0 && d > b.MaxDelay {
		d = b.MaxDelay
	}
	return d
}

// Nominal returns the delay before retry n with the cap applied and without
// jitter: the longest delay [Backoff.DelayFor] can return for n. A retry
// number below 1 waits nothing.
func (b Backoff) Nominal(n int) time.Duration {
	if n < 1 {
		return 0
	}
	var d time.Duration
	switch b.Kind {
	case BackoffConstant:
		d = b.Base
	case BackoffLinear:
		d = mulSaturating(b.Base, int64(n))
	case BackoffExponential:
		d = fromFloat(float64(b.Base) * math.Pow(b.Factor, float64(n-1)))
	case BackoffCustom:
		if b.Custom != nil {
			d = b.Custom(n)
		}
	}
	if d < 0 {
		d = 0
	}
	if b.MaxDelay > 0 && d > b.MaxDelay {
		d = b.MaxDelay
	}
	return d
}

// TotalDelay returns the sum of the nominal delays before retries 1..n,
// saturating at [MaxDuration]: the most time n retries can spend waiting.
func (b Backoff) TotalDelay(n int) time.Duration {
	var total time.Duration
	for i := 1; i <= n; i++ {
		d := b.Nominal(i)
		if total > MaxDuration-d {
			return MaxDuration
		}
		total += d
	}
	return total
}

// Validate reports every problem of b, joined; each is an [*OptionError]
// naming the field.
func (b Backoff) Validate() error {
	errs := newOptionErrors()
	b.validate(errs)
	return errs.err()
}

func (b Backoff) validate(errs optionErrors) {
	switch b.Kind {
	case BackoffNone, BackoffConstant, BackoffLinear, BackoffExponential, BackoffCustom:
	default:
		errs.add("Kind", b.Kind, "unknown backoff kind")
	}
	switch b.Jitter {
	case JitterNone, JitterFull, JitterEqual:
	default:
		errs.add("Jitter", b.Jitter, "unknown jitter")
	}
	if b.Base < 0 {
		errs.add("Base", b.Base, "must not be negative")
	}
	if b.MaxDelay < 0 {
		errs.add("MaxDelay", b.MaxDelay, "must not be negative (0 means no cap)")
	}
	switch {
	case math.IsNaN(b.Factor):
		errs.add("Factor", b.Factor, "must be a number")
	case b.Kind == BackoffExponential && b.Factor == 0:
		errs.add("Factor", b.Factor, "exponential backoff needs a factor of at least 1 (Exponential sets 2)")
	case b.Factor != 0 && b.Factor < 1:
		errs.add("Factor", b.Factor, "must be at least 1: a smaller factor shrinks the delays")
	case math.IsInf(b.Factor, 0):
		errs.add("Factor", b.Factor, "must be finite")
	}
	if b.Kind == BackoffCustom && b.Custom == nil {
		errs.add("Custom", "nil", "custom backoff needs a function")
	}
}

// String describes the curve, for plans and logs.
func (b Backoff) String() string {
	var s string
	switch b.Kind {
	case BackoffNone:
		return "none"
	case BackoffConstant:
		s = fmt.Sprintf("constant %s", b.Base)
	case BackoffLinear:
		s = fmt.Sprintf("linear %s×n", b.Base)
	case BackoffExponential:
		s = fmt.Sprintf("exponential %s×%g^(n-1)", b.Base, b.Factor)
	case BackoffCustom:
		s = "custom"
	default:
		return b.Kind.String()
	}
	if b.MaxDelay > 0 {
		s += fmt.Sprintf(" max %s", b.MaxDelay)
	}
	if b.Jitter != JitterNone && b.Kind != BackoffCustom {
		s += fmt.Sprintf(" jitter %s", b.Jitter)
	}
	return s
}

// uniform returns a number in [0, d] for d > 0.
func uniform(r Rand, d time.Duration) time.Duration {
	if d == MaxDuration {
		return time.Duration(r.Int64N(int64(d)))
	}
	return time.Duration(r.Int64N(int64(d) + 1))
}

// mulSaturating returns d × n for d ≥ 0 and n ≥ 1, saturating at MaxDuration.
func mulSaturating(d time.Duration, n int64) time.Duration {
	if d <= 0 {
		return d
	}
	if int64(d) > math.MaxInt64/n {
		return MaxDuration
	}
	return d * time.Duration(n)
}

// fromFloat converts nanoseconds to a Duration: NaN and negatives are 0,
// values past MaxDuration saturate.
func fromFloat(f float64) time.Duration {
	switch {
	case math.IsNaN(f) || f <= 0:
		return 0
	case f >= float64(math.MaxInt64):
		return MaxDuration
	default:
		return time.Duration(math.Round(f))
	}
}
