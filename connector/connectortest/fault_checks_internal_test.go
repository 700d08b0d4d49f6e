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
