package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// txnState returns the state of txnID's transaction at the broker.
func txnState(t *testing.T, a *admin, txnID string) (state string, epoch int16) {
	t.Helper()
	ds, err := a.adm.DescribeTransactions(pubContext(t), txnID)
	require.NoError(t, err)
	d, ok := ds[txnID]
	if !ok {
		return "", -1
	}
	return d.State, d.ProducerEpoch
}

// TestExactlyOnceBrokerTimesOutTransaction: a record of the epoch is held
// while the broker's TransactionTimeout passes; the broker aborts the
// transaction (with the outputs already produced in it) and bumps the
// producer's epoch. The held record's output is then refused
// (INVALID_PRODUCER_EPOCH): not the item's fault, so the error is
// transient and blameless, and under Fail the run fails with it. The
// next run reads the epoch's records again and commits each output once.
func TestExactlyOnceBrokerTimesOutTransaction(t *testing.T) {
	t.Parallel()
	eo, runErr := txnTimesOut(t, false)
	require.Error(t, runErr, "the refused output fails the run under Fail")
	assert.ErrorIs(t, runErr, kerr.InvalidProducerEpoch)
	assert.True(t, resilience.IsTransient(runErr), "the broker's abort is transient: %v", runErr)
	assert.True(t, resilience.IsBlameless(runErr), "the broker's abort is not the item's fault: %v", runErr)
	assert.GreaterOrEqual(t, eo.Source().Aborts(), int64(1), "the timed-out epoch aborted")
}

// TestExactlyOnceBrokerTimeoutDeadLettersNoItem: the same under
// DeadLetter with node restart on: the refused output is not
// dead-lettered (its record is read again and delivered then), the
// source's end of the aborted epoch (PRODUCER_FENCED) is transient, and
// a node restart reopens the client: the run goes on and commits every
// input, each output once.
func TestExactlyOnceBrokerTimeoutDeadLettersNoItem(t *testing.T) {
	t.Parallel()
	eo, runErr := txnTimesOut(t, true)
	assert.NoError(t, runErr, "the run went on to the end")
	assert.GreaterOrEqual(t, eo.Source().Aborts(), int64(1), "the timed-out epoch aborted")
}

// txnTimesOut holds one record until the broker timed its transaction
// out, then lets it go on, and returns it with the first run's error once every
// output is committed (or the run failed, then ran again).
func txnTimesOut(t *testing.T, dlq bool) (*kafka.ExactlyOnce[kafka.Message], error) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	const n = 20
	fillInput(t, addrs, in, n)
	clock := clockwork.NewFakeClock()
	txn := in + "-txn"
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: addrs, Topic: in, Group: in,
		TransactionalID: txn, Output: out, Record: echoRecord, Clock: clock, CommitInterval: time.Second,
		AckTimeout: time.Hour, MaxInFlight: 32, TransactionTimeout: time.Second})
	require.NoError(t, err)
	a := newAdmin(t, c)

	gate := make(chan struct{})
	var gateOnce sync.Once
	t.Cleanup(func() { gateOnce.Do(func() { close(gate) }) })
	hold := func(ctx context.Context, m kafka.Message) (kafka.Message, error) {
		if string(m.Value) == "v10" && m.Deliveries == 1 {
			select {
			case <-gate:
			case <-ctx.Done():
				return m, context.Cause(ctx)
			}
		}
		return m, nil
	}
	dead := deadletter.NewMemory(100)
	p1 := eoPipeline(t, eo, clock, hold)
	if dlq {
		b := pipeline.New("exactly-dead", pipeline.WithClock(clock), pipeline.WithDeadLetter(dead),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
				o.NodeRestart.MaxRestarts = 3
			}))
		s := pipeline.Source(b, "in", eo.Source())
		m := pipeline.Map(b, "apply", s, hold, pipeline.Keyed(4, kafka.RecordKey))
		pipeline.Sink(b, "out", m, eo.Sink(), pipeline.Parallel(4))
		p1, err = b.Build()
		require.NoError(t, err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := p1.Run(pubContext(t))
		res <- err
	}()
	waitFor(t, "the other outputs produced in the open epoch", func() bool { return countTopic(t, addrs, out) >= n-1 })
	waitWithin(t, 15*time.Second, func() bool {
		s, _ := txnState(t, a, txn)
		return s != "Ongoing"
	}, func() string { return "the broker never timed the transaction out" })
	gateOnce.Do(func() { close(gate) })

	var runErr error
	ended := false
	waitFor(t, "the run commits every input, or fails", func() bool {
		select {
		case runErr = <-res:
			ended = true
			return true
		default:
		}
		clock.Advance(time.Second)
		return lagOf(t, a, in, in) == 0
	})
	if !ended {
		// Every input committed in the same run: so is each output.
		checkOnce(t, readCommitted(t, addrs, out, n), n)
		eo.Source().Stop()
		waitFor(t, "the run's end", func() bool {
			clock.Advance(time.Second)
			select {
			case runErr = <-res:
				return true
			default:
				return false
			}
		})
	} else {
		assert.False(t, dlq, "with node restart the run goes on: %v", runErr)
		pass := func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil }
		require.NoError(t, runUntil(t, eoPipeline(t, eo, clock, pass), eo.Source(), clock, time.Second, func() bool {
			return lagOf(t, a, in, in) == 0
		}))
		checkOnce(t, readCommitted(t, addrs, out, n), n)
	}
	for _, env := range dead.Envelopes() {
		t.Logf("dead letter: %s: %v", env.Item.(kafka.Message).Value, env.Err)
	}
	assert.Zero(t, dead.Len(), "no item is to blame for the broker's abort of the transaction")
	return eo, runErr
}
