package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/resilience/httpretry"
)

// A rateService simulates a remote exchange-rate API over HTTP: every
// call takes some latency, a share of calls fail with 503, and for a
// while after an outage starts every connection is refused. It runs on a
// clock, so that tests can drive it with a fake one.
//
// It is the http.RoundTripper of the job's HTTP client (see rateClient):
// the client builds real requests and reads real responses, with
// httpretry, as it would from a server over the network; only the socket
// is left out, so that the demo needs no server and runs on a fake clock
// in its tests.
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

// ratesURL is where the job's client sends its calls; rateService
// answers them in-process.
const ratesURL = "http://rates.example"

// RoundTrip answers GET /rates/{currency}?order={id}: 200 with
// {"eur": rate}, 404 for a currency it does not know, 503 when it fails,
// or a refused connection during the outage.
func (s *rateService) RoundTrip(req *http.Request) (*http.Response, error) {
	order := req.URL.Query().Get("order")
	currency := strings.TrimPrefix(req.URL.Path, "/rates/")
	s.mu.Lock()
	call := s.calls[order]
	s.calls[order]++
	s.mu.Unlock()
	now := s.clock.Now()
	if !now.Before(s.outageFrom) && now.Before(s.outageUntil) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	r := rand.New(rand.NewPCG(s.seed^0xfeed, hash(order)^call))
	wait := time.Duration(float64(s.latency) * (0.5 + r.Float64()))
	fail := r.Float64() < s.failRate
	if wait > 0 {
		t := s.clock.NewTimer(wait)
		select {
		case <-t.Chan():
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		}
	}
	if fail {
		return response(req, http.StatusServiceUnavailable, "text/plain", "rates: busy, try again\n"), nil
	}
	rate, ok := eurPer[currency]
	if !ok {
		return response(req, http.StatusNotFound, "application/json", `{"error":"unknown currency"}`), nil
	}
	return response(req, http.StatusOK, "application/json", fmt.Sprintf(`{"eur":%g}`, rate)), nil
}

// response returns the response to req of a server that answers code with
// body.
func response(req *http.Request, code int, contentType, body string) *http.Response {
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", code, http.StatusText(code)),
		StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {contentType}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// A rateClient calls the exchange-rate API: the code a job calling a real
// one would have.
type rateClient struct {
	http *http.Client
	base string
}

// Rate returns how many euro one unit of currency is worth, asked for the
// order called order. httpretry.Do sends the request and turns the
// result into an error the pipeline's item retry understands: a 503 or a refused
// connection is transient, a 404 permanent, a 429 or 503 with
// Retry-After waits what the service asks for.
func (c *rateClient) Rate(ctx context.Context, order, currency string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		c.base+"/rates/"+url.PathEscape(currency)+"?order="+url.QueryEscape(order), nil)
	if err != nil {
		return 0, fmt.Errorf("rates: %w", err)
	}
	resp, err := httpretry.Do(c.http, req)
	var status *httpretry.StatusError
	if errors.As(err, &status) && status.Code == http.StatusNotFound {
		return 0, fmt.Errorf("%w %q: %w", errUnknownCurrency, currency, err)
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		EUR float64 `json:"eur"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("rates: %s %s: %w", currency, resp.Status, err)
	}
	return body.EUR, nil
}

// enrich converts an order's amount to euro with the rate service.
func (c *rateClient) enrich(ctx context.Context, o Order) (Order, error) {
	rate, err := c.Rate(ctx, o.ID, o.Currency)
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

// newRateClient returns a client of the API that svc simulates.
func newRateClient(svc *rateService) *rateClient {
	return &rateClient{http: &http.Client{Transport: svc}, base: ratesURL}
}
