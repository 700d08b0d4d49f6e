package kafka_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// heldAt delivers every record at once but those it holds, by their
// place in the emits (from 1), whose messages and dones it keeps for the
// test.
type heldAt struct {
	delivered
	hold  map[int]bool
	mu    sync.Mutex
	seen  int
	msgs  []kafka.Message
	dones []func(node.Outcome)
}

func (e *heldAt) EmitTracked(_ context.Context, m kafka.Message, done func(o node.Outcome)) error {
	e.mu.Lock()
	e.seen++
	hold := e.hold[e.seen]
	if hold {
		e.msgs, e.dones = append(e.msgs, m), append(e.dones, done)
	}
	e.mu.Unlock()
	if !hold {
		done(node.Delivered)
	}
	return nil
}

func (e *heldAt) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen
}

// item returns the envelope's item for the records held from the
// from-th on (from 0): the message, or a batch of them.
func (e *heldAt) item(from int) any {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.msgs)-from == 1 {
		return e.msgs[from]
	}
	return append([]kafka.Message(nil), e.msgs[from:]...)
}

// settle gives the records held from the from-th to the to-th (not
// included) outcome o.
func (e *heldAt) settle(from, to int, o node.Outcome) {
	e.mu.Lock()
	dones := e.dones[from:to]
	e.mu.Unlock()
	for _, d := range dones {
		d(o)
	}
}

// transientEnvelope is what the engine writes for item, which failed
// transiently.
func transientEnvelope(item any) deadletter.Envelope {
	env := deadletter.Envelope{Item: item, Err: resilience.MarkTransient(errFlaky), Attempts: 1}
	if m, ok := item.(kafka.Message); ok {
		env.CorrelationID = m.CorrelationID()
	}
	return env
}

// brokerRetryAtClose runs a source with broker retries on a partition of
// three records, holds the records at the places hold names (from 1), lets before
// act on the sink and the records held while the session is live, then
// stops the source and closes it: its drain times out on the fake clock,
// and in the at-th commit of Close (1, its own; 2, the one made as the
// client leaves, after it took what was due, when the first record held
// was delivered in the first), the session's context ended, the (other)
// records held fail transiently as one item, which reaches the
// DeadLetter sink and settles as the engine settles an item the sink
// took. It returns the sink's answer,
// what the next sink got, the tier's records and the group's commit.
func brokerRetryAtClose(t *testing.T, at int64, hold []int, before func(c *kfake.Cluster, sink deadletter.BrokerRetrier, e *heldAt)) (retried bool, letters int, tiered int64, committed map[int32]int64) {
	t.Helper()
	c, a, topic, cfg := closeSetup(t, 1000, 3*time.Second)
	tier := kafka.TierTopic(topic, time.Hour)
	a.topic(tier, 1)
	cfg.Retry = kafka.RetryTopics{Enabled: true, Delays: []time.Duration{time.Hour}}
	cfg.CommitInterval = 24 * time.Hour
	cfg.DrainTimeout = time.Second
	clock := cfg.Clock.(interface{ Advance(time.Duration) })
	src := openSource(t, cfg)
	next := deadletter.NewMemory(10)
	sink := src.DeadLetter(next).(deadletter.BrokerRetrier)

	e := &heldAt{hold: map[int]bool{}}
	for _, h := range hold {
		e.hold[h] = true
	}
	ran := make(chan error, 1)
	go func() { ran <- src.Run(testContext(t), e) }()
	waitFor(t, "the three records emitted", func() bool { return e.count() == 3 })
	if before != nil {
		before(c, sink, e)
	}
	src.Stop()
	require.NoError(t, <-ran)

	var (
		commits atomic.Int64
		ret     atomic.Bool
		wrote   = make(chan error, 1)
	)
	// At the leave's commit, the first record held was delivered at
	// Close's own, so that the leave has something to commit.
	first := int(at - 1)
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := commits.Add(1)
		if n == 1 && at == 2 {
			e.settle(0, 1, node.Delivered)
		}
		if n == at {
			// The drain gave up, the session's context ended; the held
			// item fails now.
			r, err := sink.WriteOrRetry(context.Background(), transientEnvelope(e.item(first)))
			ret.Store(r)
			wrote <- err
			e.settle(first, len(hold), node.DeadLettered) // what the engine gives an item the sink took
		}
		return nil, nil, false
	})
	closed := closeIn(src)
	waitWithin(t, 10*time.Second, func() bool {
		clock.Advance(cfg.DrainTimeout)
		return commits.Load() > 0
	}, func() string { return "Close did not commit after its drain timed out" })
	require.NoError(t, closedWithin(t, closed), "every record that settled was committed")
	select {
	case err := <-wrote:
		require.NoError(t, err)
	default:
		t.Fatalf("Close made %d commits, not %d", commits.Load(), at)
	}
	return ret.Load(), next.Len(), tierRecords(t, c, tier), a.committed(topic, topic)
}

// A record still in flight when Close's drain gives up fails transiently
// after the session's context ended, and reaches the DeadLetter sink
// while Close commits: the sink writes nothing (its next reader reads it
// again) and the item settles as dead-lettered, a broker retry. No
// commit may take it: neither Close's own nor the one made as the client
// leaves. (Found by review: the leave's commit took it, past every copy
// of it: the record was lost.)
func TestBrokerRetryAtCloseIsNotCommitted(t *testing.T) {
	retried, letters, tiered, committed := brokerRetryAtClose(t, 1, []int{2}, nil)
	assert.True(t, retried, "the sink gave the item back to its broker: a broker retry")
	assert.Zero(t, letters, "no dead letter: the record's next reader reads it again")
	assert.Zero(t, tiered, "no tier copy: the record's next reader reads it again")
	assert.Equal(t, map[int32]int64{0: 1}, committed,
		"the record the sink wrote nothing for was committed: nobody reads it again")
}

// A batch's write stored the copy of its first record and failed the
// second's while the session was live; the engine's retry of the write
// comes at Close, when both are gone. The first record, in its tier,
// settles and is committed; the second, written nowhere, is not.
func TestBrokerRetryAtCloseBatchPartlyCopied(t *testing.T) {
	retried, letters, tiered, committed := brokerRetryAtClose(t, 1, []int{2, 3}, func(c *kfake.Cluster, sink deadletter.BrokerRetrier, e *heldAt) {
		var produces atomic.Int64
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if produces.Add(1) == 1 {
				return nil, nil, false // the first copy is stored
			}
			return refusal(req.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
		})
		_, err := sink.WriteOrRetry(testContext(t), transientEnvelope(e.item(0)))
		require.Error(t, err, "the second record's copy was refused")
	})
	assert.True(t, retried)
	assert.Zero(t, letters)
	assert.Equal(t, int64(1), tiered, "the first record's copy, stored before the second's failed")
	assert.Equal(t, map[int32]int64{0: 2}, committed,
		"the first record, in its tier, is committed; the second, written nowhere, is not")
}

// The same when the item fails while the commit made as the client leaves
// is on its way: that commit took what was due, with the record in
// flight, and Close does not say that the record settled and was not
// committed (it was written nowhere: it is read again, as any record in
// flight at Close). (Before, Close said so.)
func TestBrokerRetryAtLeaveIsNotSaidSettled(t *testing.T) {
	retried, letters, tiered, committed := brokerRetryAtClose(t, 2, []int{2, 3}, nil)
	assert.True(t, retried)
	assert.Zero(t, letters)
	assert.Zero(t, tiered)
	assert.Equal(t, map[int32]int64{0: 2}, committed, "the leave's commit took the record delivered at Close's own")
}
