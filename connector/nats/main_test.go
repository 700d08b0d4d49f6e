package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/pipeline"
)

func TestMain(m *testing.M) {
	// The consumer process of the conformance suite's SIGKILL case is this
	// binary.
	connectortest.ChildMain(childConformance())
	raiseParallel(testParallel)
	goleak.VerifyTestMain(m)
}

// testParallel is how many tests run at once unless -test.parallel says
// otherwise: the tests spend their time waiting on the server (AckWait,
// BackOff, PullWait), not on the CPU, so the default of one per core
// would leave the machine idle for most of the package's run.
const testParallel = 8

// raiseParallel raises -test.parallel to n, unless the command line set it.
func raiseParallel(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", fmt.Sprint(n))
	}
}

// testTimeout guards every wait of a test against the server: each test
// waits on events, and this deadline only turns a hang into a failure.
const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName returns a name for the test's stream and consumer: the
// test's name and a random suffix, so that runs never share a stream.
// Stream names cannot hold '.', '*', '>' or spaces.
func uniqueName(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_", ".", "_", "*", "_", ">", "_").Replace(t.Name())
	return "sluice-test-" + name + "-" + hex.EncodeToString(b[:])
}

// An admin is a plain connection the tests use to set up, inspect and
// clean up the server, independently of the code under test.
type admin struct {
	t   testing.TB
	url string
	nc  *natsgo.Conn
	js  jetstream.JetStream

	mu      sync.Mutex
	streams []string
}

// newAdmin connects to the server, or skips the test when there is none.
// At the end of the test it deletes every stream the test registered (and
// with them their consumers).
func newAdmin(t testing.TB) *admin {
	t.Helper()
	url := servicetest.NATS(t)
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	a := &admin{t: t, url: url, nc: nc, js: js}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.mu.Lock()
		for _, s := range a.streams {
			_ = js.DeleteStream(ctx, s)
		}
		a.mu.Unlock()
		nc.Close()
	})
	return a
}

// cleanup registers streams to delete when the test ends.
func (a *admin) cleanup(streams ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.streams = append(a.streams, streams...)
}

// stream creates a stream named name on the subject name.>, registered
// for cleanup, and returns the subject to publish to.
func (a *admin) stream(name string) string {
	a.t.Helper()
	a.cleanup(name)
	_, err := a.js.CreateStream(testContext(a.t), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage})
	require.NoError(a.t, err)
	return name + ".in"
}

// publish sends bodies to subject, each with its body as Nats-Msg-Id, and
// waits for every PubAck.
func (a *admin) publish(subject string, bodies ...string) {
	a.t.Helper()
	ctx := testContext(a.t)
	var futures []jetstream.PubAckFuture
	for _, b := range bodies {
		f, err := a.js.PublishMsgAsync(&natsgo.Msg{Subject: subject, Data: []byte(b)}, jetstream.WithMsgID(b))
		require.NoError(a.t, err)
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			require.NoError(a.t, err)
		case <-ctx.Done():
			a.t.Fatal("publish not acknowledged")
		}
	}
}

// consumer returns what the server says of a durable consumer.
func (a *admin) consumer(stream, name string) *jetstream.ConsumerInfo {
	a.t.Helper()
	c, err := a.js.Consumer(testContext(a.t), stream, name)
	require.NoError(a.t, err)
	info, err := c.Info(testContext(a.t))
	require.NoError(a.t, err)
	return info
}

// consumerAfterAcks returns what the server says of a durable consumer
// once it has taken in the acks a finished run wrote. The server applies an
// ack on its own time, after the connection that wrote it is flushed and
// closed, so a read straight after Run may still count it pending. It polls
// until nothing is ack-pending or ackSettle passes, and returns the last
// reading either way: a message the source never acked stays pending, and
// the caller's assertion on it fails.
func (a *admin) consumerAfterAcks(stream, name string) *jetstream.ConsumerInfo {
	a.t.Helper()
	deadline := time.Now().Add(ackSettle)
	for {
		info := a.consumer(stream, name)
		if info.NumAckPending == 0 || time.Now().After(deadline) {
			return info
		}
		select {
		case <-testContext(a.t).Done():
			return info
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ackSettle bounds, on the real clock, how long the server may take to
// apply acks already written and flushed.
const ackSettle = 2 * time.Second

// messages returns how many messages the stream stores.
func (a *admin) messages(stream string) uint64 {
	a.t.Helper()
	s, err := a.js.Stream(testContext(a.t), stream)
	require.NoError(a.t, err)
	info, err := s.Info(testContext(a.t))
	require.NoError(a.t, err)
	return info.State.Msgs
}

// waitFor polls cond every few milliseconds until it holds, and fails the
// test when it does not within the test's deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx := testContext(t)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// config returns a source config for the test's stream, with a consumer
// of the same name.
func (a *admin) config(stream string) nats.SourceConfig {
	return nats.SourceConfig{URL: a.url, Stream: stream, Consumer: stream, PullWait: time.Second}
}

// ids returns n message bodies, "m-00000" and on.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m-%05d", i)
	}
	return out
}

// nodeOf returns the run's counts of the node called name, failing the
// test when the run has no such node.
func nodeOf(t testing.TB, res pipeline.Result, name string) pipeline.NodeStats {
	t.Helper()
	n, ok := res.Node(name)
	require.True(t, ok, "the run has a node %q", name)
	return n
}
