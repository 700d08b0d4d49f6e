package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/kafka"
)

// brokersEnv carries the addresses of the parent's cluster to the
// consumer processes of the conformance suite's SIGKILL and crash cases.
const brokersEnv = "SLUICE_TEST_KAFKA_BROKERS"

func TestMain(m *testing.M) {
	// The consumer processes of the conformance suite are this binary,
	// on the parent's cluster.
	connectortest.ChildMain(childConformance())
	code := func() int {
		defer closeClusters()
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	clustersMu sync.Mutex
	clusters   = map[int]*kfake.Cluster{}
)

// sharedCluster returns the test binary's cluster of n brokers, started
// on first use: kfake costs CPU, so tests share it, each with its own
// topics and groups.
func sharedCluster(t testing.TB, n int) *kfake.Cluster {
	t.Helper()
	clustersMu.Lock()
	defer clustersMu.Unlock()
	if c, ok := clusters[n]; ok {
		return c
	}
	// Sessions as short as a second, for the conformance suite's killed
	// consumers (see conformanceSessionTimeout).
	c, err := kfake.NewCluster(kfake.NumBrokers(n), kfake.GroupMinSessionTimeout(time.Second))
	require.NoError(t, err)
	clusters[n] = c
	return c
}

// closeClusters closes the shared clusters, before goleak looks.
func closeClusters() {
	clustersMu.Lock()
	defer clustersMu.Unlock()
	for n, c := range clusters {
		c.Close()
		delete(clusters, n)
	}
}

// newCluster returns a cluster of the test's own, for tests that break
// it (a broker removed, leaders moved), closed when t ends.
func newCluster(t testing.TB, n int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(n))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// testTimeout guards every wait of a test on the cluster: each waits on
// events, and this deadline only turns a hang into a failure.
const testTimeout = 45 * time.Second

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName returns a name for the test's topic and group.
func uniqueName(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_", "#", "_").Replace(t.Name())
	return "t-" + name + "-" + hex.EncodeToString(b[:])
}

// An admin is a plain client the tests use to set up and inspect the
// cluster, independently of the code under test.
type admin struct {
	t     testing.TB
	addrs []string
	cl    *kgo.Client
	adm   *kadm.Client
}

func newAdmin(t testing.TB, c *kfake.Cluster) *admin {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &admin{t: t, addrs: c.ListenAddrs(), cl: cl, adm: kadm.NewClient(cl)}
}

// topic creates a topic of n partitions.
func (a *admin) topic(name string, partitions int32) {
	a.t.Helper()
	resp, err := a.adm.CreateTopic(testContext(a.t), partitions, 1, nil, name)
	require.NoError(a.t, err)
	require.NoError(a.t, resp.Err)
}

// produce writes records to their partitions of topic and waits for
// every ack.
func (a *admin) produce(topic string, recs ...*kgo.Record) {
	a.t.Helper()
	for _, r := range recs {
		r.Topic = topic
	}
	require.NoError(a.t, a.cl.ProduceSync(testContext(a.t), recs...).FirstErr())
}

// committed returns the group's committed offsets of topic, by
// partition; a partition without a commit is absent.
func (a *admin) committed(group, topic string) map[int32]int64 {
	a.t.Helper()
	resp, err := a.adm.FetchOffsets(testContext(a.t), group)
	out := map[int32]int64{}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out // no commit yet
	}
	require.NoError(a.t, err)
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// epochs returns the leader epochs of the group's committed offsets of
// topic, by partition.
func (a *admin) epochs(group, topic string) map[int32]int32 {
	a.t.Helper()
	resp, err := a.adm.FetchOffsets(testContext(a.t), group)
	require.NoError(a.t, err)
	out := map[int32]int32{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.LeaderEpoch
		}
	})
	return out
}

// lag returns how many records of topic group has not committed yet.
func (a *admin) lag(group, topic string) int64 {
	a.t.Helper()
	ends, err := a.adm.ListEndOffsets(testContext(a.t), topic)
	require.NoError(a.t, err)
	committed := a.committed(group, topic)
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		n += o.Offset - committed[o.Partition]
	})
	return n
}

// config returns a source config for topic, with a group of the same
// name.
func (a *admin) config(topic string) kafka.SourceConfig {
	return kafka.SourceConfig{Brokers: a.addrs, Topic: topic, Group: topic}
}

// rec returns a record of partition p with value v and key k ("" for
// none).
func rec(p int32, k, v string) *kgo.Record {
	r := &kgo.Record{Partition: p, Value: []byte(v)}
	if k != "" {
		r.Key = []byte(k)
	}
	return r
}

// waitFor polls cond every few milliseconds until it holds, and fails the
// test when it does not within the test's deadline. The cluster runs in
// real time: this is the only real wait of the tests.
// waitWithin polls cond, on a ticker, until it holds, and fails the test
// with the message explain gives once within of real time passed: for
// progress of the in-process cluster, which the fake clock does not drive.
func waitWithin(t testing.TB, within time.Duration, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(explain())
		case <-tick.C:
		}
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx := testContext(t)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
