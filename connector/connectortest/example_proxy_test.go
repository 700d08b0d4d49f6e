package connectortest_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// A test passes its *testing.T to NewProxy, which closes the proxy when
// the test ends. An example has none: exampleTB stands in for one, and
// runs what was registered with Cleanup when the example ends.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (*exampleTB) Helper()                   {}
func (*exampleTB) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (*exampleTB) FailNow()                  { panic("the proxy did not start") }
func (t *exampleTB) Cleanup(f func())        { t.cleanups = append(t.cleanups, f) }
func (t *exampleTB) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A Proxy between a client and its server (here an echo server standing
// for a broker) applies one fault at a time to every connection, until
// Clear: latency makes a round trip slower, a partition holds the bytes
// and Clear delivers them.
func ExampleProxy() {
	t := &exampleTB{}
	defer t.cleanup()
	echo := connectortest.NewEcho(t) // a server that writes back what it reads
	p := connectortest.NewProxy(t, echo.Addr())
	c, _ := net.Dial("tcp", p.Addr()) // a client dials the proxy, not the server
	defer c.Close()
	buf := make([]byte, 4)

	p.Latency(50*time.Millisecond, 0) // each way
	start := time.Now()
	_, _ = c.Write([]byte("ping"))
	_, _ = io.ReadFull(c, buf)
	fmt.Printf("%s after 100 ms or more: %v\n", buf, time.Since(start) >= 100*time.Millisecond)

	p.Partition()
	_, _ = c.Write([]byte("held"))
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(buf)
	fmt.Println("partitioned, nothing comes back:", errors.Is(err, os.ErrDeadlineExceeded))

	p.Clear()
	_ = c.SetReadDeadline(time.Time{})
	_, _ = io.ReadFull(c, buf)
	fmt.Printf("cleared: %s\n", buf)
	// Output:
	// ping after 100 ms or more: true
	// partitioned, nothing comes back: true
	// cleared: held
}
