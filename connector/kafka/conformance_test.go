package kafka_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// TestConformance runs the connector conformance suite against a kfake
// cluster of one broker: a topic of three partitions per case, consumed
// by a group of the same name.
func TestConformance(t *testing.T) {
	c := sharedCluster(t, 1)
	// The consumer processes of the SIGKILL and crash cases reach the
	// cluster through the environment they inherit.
	require.NoError(t, os.Setenv(brokersEnv, strings.Join(c.ListenAddrs(), ",")))
	connectortest.Run(t, conformance{brokers: c.ListenAddrs()})
}

// Settings of the suite's sources.
const (
	// conformancePartitions is the partitions of each case's topic.
	conformancePartitions = 3
	// conformanceSessionTimeout is how long the group waits for a killed
	// member before its partitions go to others: short, for the cases
	// that kill consumers (the suite's cluster allows it; Kafka's least
	// is 6 s by default).
	conformanceSessionTimeout = 3 * time.Second
	// conformanceCommitInterval is short, so that a case's checks of the
	// group's lag see what settled soon after it did.
	conformanceCommitInterval = 50 * time.Millisecond
)

// A conformance plugs the Kafka connector into connectortest. A queue is
// a topic of three partitions and a consumer group named after it; a
// message's key is the record's key.
type conformance struct{ brokers []string }

// childConformance is the harness of the suite's consumer processes,
// which have no test to start a cluster: they use the parent's, whose
// addresses their environment carries.
func childConformance() conformance {
	return conformance{brokers: strings.Split(os.Getenv(brokersEnv), ",")}
}

func (h conformance) Addr() string { return h.brokers[0] }

func (h conformance) config(cfg connectortest.SourceConfig) kafka.SourceConfig {
	kc := kafka.SourceConfig{
		Brokers: h.brokers, Topic: cfg.Queue, Group: cfg.Queue,
		MaxInFlight: cfg.Prefetch, CommitInterval: conformanceCommitInterval,
		SessionTimeout: conformanceSessionTimeout, RevokeTimeout: 5 * time.Second,
		MaxDeliveries: cfg.MaxDeliveries, CrashLedger: cfg.CrashLedger,
	}
	if cfg.Retry.Delay > 0 {
		// The broker's retry path: one tier of the delay, each retry to it.
		kc.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{cfg.Retry.Delay}, MaxRetries: cfg.Retry.MaxRetries}
	}
	if cfg.Addr != "" {
		// Every connection, to whichever broker, goes through the
		// suite's proxy, so that cutting it cuts them all.
		addr := cfg.Addr
		kc.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	return kc
}

// client returns a plain client of the cluster, closed when t ends.
func (h conformance) client(t testing.TB) (*kgo.Client, *kadm.Client) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// CreateQueue creates the topic and its retry tiers, and deletes them and
// the group when t ends.
func (h conformance) CreateQueue(t testing.TB, cfg connectortest.SourceConfig) {
	_, adm := h.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics := append([]string{cfg.Queue}, h.config(cfg).Retry.TierTopics(cfg.Queue)...)
	resp, err := adm.CreateTopics(ctx, conformancePartitions, 1, nil, topics...)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteGroup(ctx, cfg.Queue)
		_, _ = adm.DeleteTopics(ctx, topics...)
	})
}

// Publish produces msgs to the topic, each with its key as the record's
// key, and waits for every ack.
func (h conformance) Publish(t testing.TB, queue string, msgs ...connectortest.Message) {
	// Batches of at most 512 bytes (the least franz-go takes), so that a
	// fetch of one batch is a few records: see NewSource.
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ProducerBatchMaxBytes(512))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = &kgo.Record{Topic: queue, Key: []byte(m.Key), Value: m.Body}
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// Pending is the group's lag over the topic and its retry tiers (a
// record waiting for its retry is in one): the records past its
// committed offsets.
func (h conformance) Pending(t testing.TB, queue string) int {
	_, adm := h.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	topics := []string{queue}
	for _, name := range all.Names() {
		if strings.HasPrefix(name, queue+".retry.") {
			topics = append(topics, name)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	require.NoError(t, err)
	committed, err := adm.FetchOffsets(ctx, queue)
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil // no commit yet
	}
	require.NoError(t, err)
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			at = c.At
		}
		n += o.Offset - at
	})
	return int(n)
}

func (h conformance) NewSource(cfg connectortest.SourceConfig) (connectortest.Consumer[kafka.Message], error) {
	src, err := kafka.NewSource(h.config(cfg))
	if err != nil {
		return connectortest.Consumer[kafka.Message]{}, err
	}
	if cfg.Addr != "" {
		// A client finds a cut connection only when it next uses it. A
		// fetch at a time of one batch (Publish makes small ones) keeps
		// it fetching, so that it finds the cut while the case's
		// records still flow, as a client of a busy topic does.
		kafka.AddClientOpts(src, kgo.FetchMaxBytes(1), kgo.FetchMaxPartitionBytes(1))
	}
	return connectortest.Consumer[kafka.Message]{Source: src, DeadLetter: src.DeadLetter}, nil
}

// NewPublisher returns a sink that produces each message with franz-go
// and waits for its ack.
func (h conformance) NewPublisher(queue string) (node.Sink[connectortest.Message], error) {
	return &producer{brokers: h.brokers, topic: queue}, nil
}

// NewPublisherVia is the connector's own Publisher, every connection of
// which dials addr (the fault mode's proxy): acks=all, idempotent, a
// record that never reached a broker retried, one whose outcome the fault
// left unknown failed as transient for the suite's item retry, which may
// store it twice (counted as the suite's duplicates).
func (h conformance) NewPublisherVia(queue, addr string) (node.Sink[connectortest.Message], error) {
	return kafka.NewPublisher(kafka.PublisherConfig[connectortest.Message]{
		Brokers: h.brokers, Topic: queue,
		Record: func(m connectortest.Message) (*kgo.Record, error) {
			return &kgo.Record{Key: []byte(m.Key), Value: m.Body}, nil
		},
		PubRetry: kafka.PubRetry{Enabled: true},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
}

// ConnectionsPerSession is how many connections franz-go opens for one
// session with the one kfake broker: the seed broker's, and the broker's
// own for metadata, fetches and the group (a publisher's produce takes
// the place of the last two). The fault mode counts the connections
// opened again after a fault four at a time as a session given up.
func (h conformance) ConnectionsPerSession() int { return 4 }

func (h conformance) Message(m kafka.Message) connectortest.Message {
	return connectortest.Message{Key: string(m.Key), Body: m.Value, Delivery: m.Deliveries}
}

// A producer is the suite's publisher: franz-go's client, acks=all and
// idempotent by default, producing each message with its key.
type producer struct {
	brokers []string
	topic   string
	cl      *kgo.Client
}

func (p *producer) Open(context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...), kgo.DefaultProduceTopic(p.topic))
	p.cl = cl
	return err
}

func (p *producer) Write(ctx context.Context, m connectortest.Message) error {
	return p.cl.ProduceSync(ctx, &kgo.Record{Key: []byte(m.Key), Value: m.Body}).FirstErr()
}

func (p *producer) Close(context.Context) error {
	if p.cl != nil {
		p.cl.Close()
	}
	return nil
}
