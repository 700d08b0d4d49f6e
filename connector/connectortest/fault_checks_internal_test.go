package connectortest

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fatalRecorder is a test whose assertion failures are recorded, not
// reported, and whose FailNow ends the goroutine that called it, as
// testing's does: checkInjection's requirements stop the check.
type fatalRecorder struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (r *fatalRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, format)
}

func (r *fatalRecorder) FailNow() { runtime.Goexit() }

// failuresOf runs check in a goroutine of its own with a recorder, and
// returns the failures it recorded.
func failuresOf(t *testing.T, check func(testing.TB)) []string {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(rec)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.failures
}

func faultNamed(t *testing.T, name string) fault {
	for _, f := range faults() {
		if f.name == name {
			return f
		}
	}
	require.FailNow(t, "no such fault", name)
	return fault{}
}

// A connector that never dialled the proxy (it ignores SourceConfig.Addr,
// or NewPublisherVia's addr) was never touched by the fault: every fault
// case fails it, the ones whose fault lasts a while (which wait for no
// reconnection) included.
func TestFaultCaseFailsAConnectorThatBypassesTheProxy(t *testing.T) {
	for _, f := range faults() {
		t.Run(f.name, func(t *testing.T) {
			in := &injection{f: f, px: &Proxy{}, applied: true, connsAtFault: 0, noticed: time.Second,
				upAtLift: 1000, downAtLift: 1000} // bytes of other clients' would not save it
			got := failuresOf(t, func(tb testing.TB) { checkInjection(tb, in, time.Now()) })
			assert.NotEmpty(t, got, "%s: a fault applied to no connection of the connector fails the case", f.name)
		})
	}
}

// A connector with a connection through the proxy that sent nothing
// through it while a lasting fault was on (it dialled the proxy once, then
// the broker, as a Kafka client does after its first metadata answer
// without a dial of its own) was not touched by the fault either.
func TestLastingFaultCaseFailsWhenNoBytesCrossedTheProxy(t *testing.T) {
	for _, name := range []string{"latency", "bandwidth", "slicer", "partition"} {
		t.Run(name, func(t *testing.T) {
			f := faultNamed(t, name)
			in := &injection{f: f, px: &Proxy{}, applied: true, connsAtFault: 1,
				upAtFault: 500, downAtFault: 700, upAtLift: 500, downAtLift: 700}
			got := failuresOf(t, func(tb testing.TB) { checkInjection(tb, in, time.Now()) })
			assert.NotEmpty(t, got, "%s: a fault under which no byte reached the proxy fails the case", name)

			// The same case with bytes one way while the fault was on
			// (a partition holds the broker's answers) passes.
			in.upAtLift = 600
			got = failuresOf(t, func(tb testing.TB) { checkInjection(tb, in, time.Now()) })
			assert.Empty(t, got, "%s: a fault the connector's bytes went through passes", name)
		})
	}
}

// The proxy counts the bytes it reads from the client and from the
// broker, each way apart.
func TestProxyCountsBytesEachWay(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, NewEcho(t).Addr())
	up, down := p.bytesIn()
	require.Zero(t, up+down)
	c := dialProxy(t, p)
	echo(t, c, randomBytes(3000))
	up, down = p.bytesIn()
	assert.EqualValues(t, 3000, up, "the bytes from the client")
	assert.EqualValues(t, 3000, down, "the bytes from the broker, the echo")

}

// withDuplicates returns the counts of faultMessages messages, the first
// n of them delivered twice.
func withDuplicates(n int) map[string]int {
	counts := map[string]int{}
	for i, k := range keys(faultMessages) {
		counts[k] = 1
		if i < n {
			counts[k] = 2
		}
	}
	return counts
}

// One session given up costs at most its prefetch of duplicates, however
// many connections the client opens to replace it. The Kafka chaos run's
// Fault/timeout/Consume logged 11 connections through the proxy, 4 when
// the fault began, 7 since that carried bytes both ways, and 1 restart:
// franz-go opens a connection per kind of request. Counting each of those
// 7 as a session given up allowed 7 × 20 = 140 duplicates of 400.
func TestOneLostSessionAllowsOnePrefetch(t *testing.T) {
	timeout := faultNamed(t, "timeout")
	in := &injection{f: timeout, px: &Proxy{accepted: 11, carried: []int{5, 6, 7, 8, 9, 10, 11}}, connsAtFault: 4}
	for _, c := range []struct {
		name       string
		restarts   int64
		perSession int
	}{
		{"one restart", 1, 1},             // the engine saw one session given up
		{"no restart, 5 a session", 0, 5}, // the harness says how many connections a session opens: 7 is 2 sessions at most
	} {
		t.Run(c.name, func(t *testing.T) {
			allowed := faultPrefetch
			if c.restarts == 0 {
				allowed = 2 * faultPrefetch
			}
			rec := &failRecorder{TB: t}
			checkDuplicates(rec, in, withDuplicates(allowed+1), faultPrefetch, c.restarts, c.perSession)
			assert.NotEmpty(t, rec.failures, "%d duplicates after %s fail the case", allowed+1, c.name)

			rec = &failRecorder{TB: t}
			checkDuplicates(rec, in, withDuplicates(allowed), faultPrefetch, c.restarts, c.perSession)
			assert.Empty(t, rec.failures, "%d duplicates after %s pass", allowed, c.name)
		})
	}

	// Sessions the engine saw given up, each replaced by a connection
	// that carried bytes, each allow a prefetch.
	in = &injection{f: timeout, px: &Proxy{accepted: 4, carried: []int{2, 3, 4}}, connsAtFault: 1}
	rec := &failRecorder{TB: t}
	checkDuplicates(rec, in, withDuplicates(3*faultPrefetch), faultPrefetch, 3, 1)
	assert.Empty(t, rec.failures, "three sessions given up allow three prefetches")
}
