package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pubTimeout guards every wait of a test on the cluster: each test waits on
// events, and this deadline only turns a hang into a failure.
const pubTimeout = 30 * time.Second

func pubContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pubTimeout)
	t.Cleanup(cancel)
	return ctx
}

// pubName returns a fresh topic name for t.
func pubName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return "t-" + name + "-" + hex.EncodeToString(b[:])
}

// shared returns the test binary's cluster of one broker, which the
// tests that do not change it share, each on topics of its own.
func shared(t testing.TB) *kfake.Cluster { return sharedCluster(t, 1) }

// createTopicOn creates a topic of partitions partitions on c, with the
// topic configs given as key, value pairs.
func createTopicOn(t testing.TB, c *kfake.Cluster, topic string, partitions int32, configs ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	cfg := map[string]*string{}
	for i := 0; i+1 < len(configs); i += 2 {
		cfg[configs[i]] = &configs[i+1]
	}
	_, err = kadm.NewClient(cl).CreateTopic(pubContext(t), partitions, 1, cfg, topic)
	require.NoError(t, err)
}

// readTopic reads records of topic from the start until it has n, with
// the isolation level given, and fails t if they do not come in time.
// More than n are returned when the topic holds more once n arrived.
func readTopic(t testing.TB, addrs []string, topic string, n int, level kgo.IsolationLevel) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level))
	require.NoError(t, err)
	defer cl.Close()
	ctx := pubContext(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records of %s", len(out), n, topic)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// countTopic returns how many records topic holds, by the partitions' end
// offsets less their starts (transaction markers count too).
func countTopic(t testing.TB, addrs []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(pubContext(t), topic)
	require.NoError(t, err)
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// A gate is a Dial for a client that can be shut: while shut, dialling
// fails with a refused connection and the connections it made are closed,
// as when a cluster went away.
type gate struct {
	mu    sync.Mutex
	shut  bool
	conns []net.Conn
	dials int
}

func (g *gate) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dials++
	if g.shut {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errRefused}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err == nil {
		g.conns = append(g.conns, c)
	}
	return c, err
}

var errRefused = &refused{}

type refused struct{}

func (*refused) Error() string { return "connection refused (the test's gate is shut)" }

// Shut closes every connection and refuses new ones until Open.
func (g *gate) Shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = true
	for _, c := range g.conns {
		_ = c.Close()
	}
	g.conns = nil
}

// Open lets connections through again.
func (g *gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = false
}

// Dials returns how many connections the client asked for.
func (g *gate) Dials() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dials
}

// lagOf returns what group has not committed of topic: the sum, over its
// partitions, of the end offset less the committed one (the start, 0,
// without a commit).
func lagOf(t testing.TB, a *admin, group, topic string) int64 {
	t.Helper()
	ends, err := a.adm.ListEndOffsets(pubContext(t), topic)
	require.NoError(t, err)
	committed := a.committed(group, topic)
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset - committed[o.Partition] })
	return n
}
