package kafka_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/resilience"
)

// loseFirstAnswer makes c store the first produce request it gets while
// g cuts the client's connection before the answer (franz-go marks
// nothing unsure), and answers each later one with code for every
// partition while refuse(n), n its count from 2, says so (else the
// broker handles it).
func loseFirstAnswer(c *kfake.Cluster, g *gate, code int16, refuse func(n int64) bool) {
	var produces atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := produces.Add(1)
		if n == 1 {
			g.Shut()
			g.Open()
			return nil, nil, false
		}
		if !refuse(n) {
			return nil, nil, false
		}
		return refusal(r.(*kmsg.ProduceRequest), code), nil, true
	})
}

// refusal is the answer to req that refuses each of its partitions with
// code.
func refusal(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// lostAnswerTopic returns a cluster of the test's own with a topic of
// one partition, and a gate for the publisher's connections.
func lostAnswerTopic(t *testing.T) (*kfake.Cluster, string, *gate) {
	t.Helper()
	c := newCluster(t, 1)
	topic := pubName(t)
	createTopicOn(t, c, topic, 1)
	return c, topic, &gate{}
}

// lostAnswerWrite writes one record through a publisher with PubRetry on
// a one-partition topic of c, whose connections g gates, advancing the
// publisher's clock until the Write ends (each step calls step first),
// and returns the publisher and the Write's error.
func lostAnswerWrite(t *testing.T, c *kfake.Cluster, g *gate, topic string, step func(*kafka.Publisher[[]byte])) (*kafka.Publisher[[]byte], error) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic,
		Dial: g.Dial, Clock: clock, AckTimeout: 1000 * time.Hour, DeliveryTimeout: time.Second,
		PubRetry: kafka.PubRetry{Enabled: true, MaxRetry: 5, Delay: time.Minute},
		Record:   func(v []byte) (*kgo.Record, error) { return &kgo.Record{Key: []byte("k"), Value: v}, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	t.Cleanup(func() { pub.Close(ctx) })
	res := make(chan error, 1)
	go func() { res <- pub.Write(ctx, []byte("once")) }()
	var werr error
	advanceUntil(t, clock, time.Minute, func() bool {
		step(pub)
		select {
		case werr = <-res:
			return true
		default:
			return false
		}
	})
	return pub, werr
}

// refuseOnceThen refuses the first resend alone and starts outage with
// that refusal.
func refuseOnceThen(outage *atomic.Bool) func(n int64) bool {
	return func(n int64) bool {
		if n == 2 {
			outage.Store(true)
			return true
		}
		return false
	}
}

// endsOnOutcome is a step for lostAnswerWrite that clears fault once the
// publisher counted a retry or an unknown outcome: the cluster's fault
// ends after it told the Write's outcome.
func endsOnOutcome(fault *atomic.Bool) func(*kafka.Publisher[[]byte]) {
	return func(pub *kafka.Publisher[[]byte]) {
		if pub.Retries() > 0 || pub.Unknown() > 0 {
			fault.Store(false)
		}
	}
}

// assertUnknownOnce checks that werr is an unknown outcome, transient and
// blameless, counted once, not produced again by PubRetry, and that the
// topic holds the record once.
func assertUnknownOnce(t *testing.T, c *kfake.Cluster, topic string, pub *kafka.Publisher[[]byte], werr error) {
	t.Helper()
	require.ErrorIs(t, werr, kafka.ErrOutcomeUnknown)
	assert.True(t, resilience.IsTransient(werr), "transient: %v", werr)
	assert.True(t, resilience.IsBlameless(werr), "blameless: %v", werr)
	assert.Zero(t, pub.Retries(), "PubRetry does not produce an unknown record again")
	assert.Equal(t, int64(1), pub.Unknown())
	assert.Equal(t, int64(1), countTopic(t, c.ListenAddrs(), topic), "one Write, stored once")
}

// A record is written to the broker and stored, but its connection dies
// before the answer. Its resend is answered NOT_LEADER_FOR_PARTITION, an
// answer after which franz-go may fail the batch again; metadata then
// fails until DeliveryTimeout, and franz-go fails the record with the
// metadata load error, a client-side error. The record was stored, so
// the Write's outcome is unknown (transient, blameless, counted in
// Unknown) and PubRetry does not produce it again: the topic holds it
// once.
func TestPublisherLoadErrorAfterALostAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	c, topic, g := lostAnswerTopic(t)
	var outage atomic.Bool
	loseFirstAnswer(c, g, kerr.NotLeaderForPartition.Code, refuseOnceThen(&outage))
	c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if outage.Load() {
			return nil, errors.New("metadata outage"), true
		}
		return nil, nil, false
	})
	pub, werr := lostAnswerWrite(t, c, g, topic, endsOnOutcome(&outage))
	assertUnknownOnce(t, c, topic, pub, werr)
}

// As above, but every resend is answered NOT_LEADER_FOR_PARTITION
// (retryable) until the Write ends: at DeliveryTimeout franz-go fails the
// record with ErrRecordTimeout, though its first send was stored.
func TestPublisherRecordTimeoutAfterALostAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	c, topic, g := lostAnswerTopic(t)
	var refusing atomic.Bool
	refusing.Store(true)
	loseFirstAnswer(c, g, kerr.NotLeaderForPartition.Code, func(int64) bool { return refusing.Load() })
	pub, werr := lostAnswerWrite(t, c, g, topic, endsOnOutcome(&refusing))
	assertUnknownOnce(t, c, topic, pub, werr)
}

// As the first, but the outage is a metadata answer whose partition has
// no leader (LEADER_NOT_AVAILABLE, leader -1): franz-go fails the stored
// batch at DeliveryTimeout with that broker code, which is not the
// broker's answer to the record. Its outcome is unknown too.
func TestPublisherLeaderNotAvailableAfterALostAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	c, topic, g := lostAnswerTopic(t)
	var outage atomic.Bool
	loseFirstAnswer(c, g, kerr.NotLeaderForPartition.Code, refuseOnceThen(&outage))
	noLeaderWhile(t, c, topic, &outage)
	pub, werr := lostAnswerWrite(t, c, g, topic, func(*kafka.Publisher[[]byte]) {})
	outage.Store(false)
	assertUnknownOnce(t, c, topic, pub, werr)
}

// noLeaderWhile makes c's metadata answers give topic's partitions no
// leader (LEADER_NOT_AVAILABLE, leader -1) while on is set.
func noLeaderWhile(t *testing.T, c *kfake.Cluster, topic string, on *atomic.Bool) {
	t.Helper()
	raw, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	cached, err := kmsg.NewPtrMetadataRequest().RequestWith(pubContext(t), raw)
	raw.Close()
	require.NoError(t, err)
	c.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		resp := *cached
		resp.Version = r.GetVersion()
		resp.Topics = nil
		for _, ct := range cached.Topics {
			if ct.Topic == nil || *ct.Topic != topic {
				continue
			}
			ps := make([]kmsg.MetadataResponseTopicPartition, 0, len(ct.Partitions))
			for _, p := range ct.Partitions {
				p.ErrorCode, p.Leader = kerr.LeaderNotAvailable.Code, -1
				ps = append(ps, p)
			}
			ct.Partitions = ps
			resp.Topics = append(resp.Topics, ct)
		}
		return &resp, nil, true
	})
}

// A record is stored, its answer lost, and its resend refused for its
// batch: as too large (the topic's limit lowered in between), invalid,
// corrupt (damaged on the way), with a bad timestamp (its age past the
// topic's limit by then), or, on every resend, for no such partition.
// The refusal answers the resend alone: the record is not produced
// again (alone, or by PubRetry), its outcome is unknown, and the topic
// holds it once.
func TestPublisherRefusalAfterALostAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code  int16
		every bool
	}{
		{code: kerr.MessageTooLarge.Code},
		{code: kerr.InvalidRecord.Code},
		{code: kerr.CorruptMessage.Code},
		{code: kerr.InvalidTimestamp.Code},
		{code: kerr.UnknownTopicOrPartition.Code, every: true},
	} {
		t.Run(kerr.ErrorForCode(tc.code).(*kerr.Error).Message, func(t *testing.T) {
			t.Parallel()
			c, topic, g := lostAnswerTopic(t)
			loseFirstAnswer(c, g, tc.code, func(n int64) bool { return tc.every || n == 2 })
			pub, werr := lostAnswerWrite(t, c, g, topic, func(*kafka.Publisher[[]byte]) {})
			assertUnknownOnce(t, c, topic, pub, werr)
		})
	}
}

// garbleDial dials normally; once armed, it flips a bit of the
// correlation ID of the next answer read on a connection that wrote a
// produce request: the read succeeds (no read error for a hook to see),
// and the client drops the answer and breaks the connection.
type garbleDial struct{ armed atomic.Bool }

func (d *garbleDial) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &garbleConn{Conn: c, d: d, sizeLeft: 4}, nil
}

// A garbleConn is a connection of a garbleDial; it follows the size
// prefixes of the answers it reads to find each one's first byte.
type garbleConn struct {
	net.Conn
	d        *garbleDial
	produce  atomic.Bool
	mu       sync.Mutex
	sizeLeft int // bytes of the size prefix still to read
	size     uint32
	bodyOff  int
	bodyLeft int
	flip     bool
}

func (c *garbleConn) Write(p []byte) (int, error) {
	if len(p) >= 6 && p[4] == 0 && p[5] == 0 { // request key 0: Produce
		c.produce.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *garbleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range n {
		if c.sizeLeft > 0 {
			c.size = c.size<<8 | uint32(p[i])
			c.sizeLeft--
			if c.sizeLeft == 0 {
				c.bodyLeft, c.bodyOff = int(c.size), 0
				c.flip = c.produce.Load() && c.d.armed.CompareAndSwap(true, false)
			}
			continue
		}
		if c.flip && c.bodyOff == 0 {
			p[i] ^= 0x40
		}
		c.bodyOff++
		c.bodyLeft--
		if c.bodyLeft == 0 {
			c.sizeLeft, c.size = 4, 0
		}
	}
	return n, err
}

// As above, but the first send's answer arrives garbled (its correlation
// ID), which the client drops with no read error: the broken connection
// still tells the publisher an answer may be lost, and the refusal of the
// resend as too large leaves the record unknown, stored once.
func TestPublisherRefusalAfterAGarbledAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	c, topic, _ := lostAnswerTopic(t)
	d := &garbleDial{}
	var produces atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch produces.Add(1) {
		case 1:
			d.armed.Store(true)
		case 2:
			return refusal(r.(*kmsg.ProduceRequest), kerr.MessageTooLarge.Code), nil, true
		}
		return nil, nil, false
	})
	clock := clockwork.NewFakeClock()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[[]byte]{Brokers: c.ListenAddrs(), Topic: topic,
		Dial: d.Dial, Clock: clock, AckTimeout: time.Hour, DeliveryTimeout: time.Second,
		PubRetry: kafka.PubRetry{Enabled: true, MaxRetry: 5, Delay: time.Minute},
		Record:   func(v []byte) (*kgo.Record, error) { return &kgo.Record{Key: []byte("k"), Value: v}, nil }})
	require.NoError(t, err)
	ctx := pubContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	assertUnknownOnce(t, c, topic, pub, pub.Write(ctx, []byte("once")))
}
