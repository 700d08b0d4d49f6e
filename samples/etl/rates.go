package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/resilience"
)

// A rateService simulates a remote exchange-rate API: every call takes some
// latency, a share of calls fail with 503, and for a while after an outage
// starts every call is refused. It runs on a clock, so that tests can drive
// it with a fake one.
//
// Whether a call fails with 503 and how long it takes are drawn from the
// seed, the order and how many times the order was asked for before, never
// from the order in which the workers happen to call: which calls fail does
// not depend on goroutine scheduling. Only the outage depends on the time.
type rateService struct {
	clock       clockwork.Clock
	seed        uint64
	latency     time.Duration // mean; each call takes 50 % to 150 % of it
	failRate    float64
	outageFrom  time.Time
	outageUntil time.Time

	mu    sync.Mutex
	calls map[string]uint64 // by order: calls so far
}

// eurPer says how many euro one unit of each currency is worth.
var eurPer = map[string]float64{"EUR": 1, "USD": 0.92, "GBP": 1.17, "CHF": 1.05, "JPY": 0.0061}

// statusError is an HTTP-style error; the default classifier treats 5xx as
// transient.
type statusError struct{ code int }

func (e *statusError) Error() string   { return fmt.Sprintf("rates: HTTP %d", e.code) }
func (e *statusError) StatusCode() int { return e.code }

// errUnknownCurrency is permanent: no retry teaches the service a currency.
var errUnknownCurrency = errors.New("rates: unknown currency")

func newRateService(clock clockwork.Clock, seed uint64, latency time.Duration, failRate float64, outageAfter, outage time.Duration) *rateService {
	start := clock.Now()
	return &rateService{
		clock: clock, seed: seed, latency: latency, failRate: failRate,
		outageFrom: start.Add(outageAfter), outageUntil: start.Add(outageAfter + outage),
		calls: make(map[string]uint64),
	}
}

// Rate returns how many euro one unit of currency is worth, asked for the
// order called order.
func (s *rateService) Rate(ctx context.Context, order, currency string) (float64, error) {
	s.mu.Lock()
	call := s.calls[order]
	s.calls[order]++
	s.mu.Unlock()
	now := s.clock.Now()
	if !now.Before(s.outageFrom) && now.Before(s.outageUntil) {
		return 0, fmt.Errorf("rates: dial: %w", syscall.ECONNREFUSED)
	}
	r := rand.New(rand.NewPCG(s.seed^0xfeed, hash(order)^call))
	wait := time.Duration(float64(s.latency) * (0.5 + r.Float64()))
	fail := r.Float64() < s.failRate
	if wait > 0 {
		t := s.clock.NewTimer(wait)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
	if fail {
		return 0, &statusError{503}
	}
	rate, ok := eurPer[currency]
	if !ok {
		return 0, resilience.MarkPermanent(fmt.Errorf("%w %q", errUnknownCurrency, currency))
	}
	return rate, nil
}

// enrich converts an order's amount to euro with the rate service.
func (s *rateService) enrich(ctx context.Context, o Order) (Order, error) {
	rate, err := s.Rate(ctx, o.ID, o.Currency)
	if err != nil {
		return o, err
	}
	o.EURCents = int64(float64(o.Cents)*rate + 0.5)
	return o, nil
}

// hash returns the 64-bit FNV-1a hash of s.
func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
