package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A takeoverEnv is an input topic of records and an empty output topic
// on a cluster of its own, and an ExactlyOnce that echoes the one into
// the other.
type takeoverEnv struct {
	c       *kfake.Cluster
	a       *admin
	in, out string
	eo      *kafka.ExactlyOnce[kafka.Message]
	clock   *clockwork.FakeClock
}

// takeoverSetup returns a takeoverEnv whose input holds n records.
func takeoverSetup(t *testing.T, n int) *takeoverEnv {
	t.Helper()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1)
	fillInput(t, addrs, in, n)
	env := &takeoverEnv{c: c, a: newAdmin(t, c), in: in, out: out}
	env.eo, env.clock = env.newEO(t)
	return env
}

// newEO returns a new ExactlyOnce of env, as a restarted process makes.
func (env *takeoverEnv) newEO(t *testing.T) (*kafka.ExactlyOnce[kafka.Message], *clockwork.FakeClock) {
	clock := clockwork.NewFakeClock()
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: env.c.ListenAddrs(), Topic: env.in, Group: env.in,
		TransactionalID: env.in + "-txn", Output: env.out, Record: echoRecord, Clock: clock,
		CommitInterval: time.Hour, AckTimeout: time.Hour, MaxInFlight: 32, CloseTimeout: 2 * time.Second,
		SessionTimeout: 6 * time.Second})
	require.NoError(t, err)
	return eo, clock
}

// readCommittedCount reads every read_committed record of topic within wait.
func readCommittedCount(t *testing.T, addrs []string, topic string, wait time.Duration) int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n := 0
	for ctx.Err() == nil {
		n += len(cl.PollFetches(ctx).Records())
	}
	return n
}

// hookEmitter writes each message with the sink, settles it by the
// Write's outcome, and runs hook after the first one's settle.
type hookEmitter struct {
	delivered
	sink *kafka.TransactSink[kafka.Message]
	hook func()
	mu   sync.Mutex
	seen int
	errs []error
}

func (e *hookEmitter) EmitTracked(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
	err := e.sink.Write(ctx, m)
	e.mu.Lock()
	e.seen++
	first := e.seen == 1
	e.errs = append(e.errs, err)
	e.mu.Unlock()
	if err != nil {
		done(node.Failed)
	} else {
		done(node.Delivered)
	}
	if first && e.hook != nil {
		e.hook()
	}
	return nil
}

// Close called while Run is still in progress, between two records of
// one poll (from the emitter, on Run's goroutine; another goroutine can
// land there too), aborts the epoch: a commit would commit the offsets
// of the records not yet emitted. Run then stops with an error matching
// ErrNotOpen, the outputs of the two records it still emits are stale
// (their Writes return nil), and a restarted source reads all three
// again. The old code committed all three offsets with one output.
func TestExactlyOnceCloseDuringAPollCommitsNoUnemittedRecord(t *testing.T) {
	env := takeoverSetup(t, 3)
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	var cerr error
	em := &hookEmitter{sink: env.eo.Sink()}
	em.hook = func() { cerr = src.Close(context.Background()) }
	rerr := src.Run(testContext(t), em)
	t.Logf("Run: %v; Close: %v; Write errors: %v; commits %d aborts %d unknowns %d",
		rerr, cerr, em.errs, src.Commits(), src.Aborts(), src.Unknowns())
	committed := env.a.committed(env.in, env.in)[0]
	outs := readCommittedCount(t, env.c.ListenAddrs(), env.out, 2*time.Second)
	t.Logf("input offset committed: %d, read_committed outputs: %d", committed, outs)
	assert.LessOrEqual(t, committed, int64(outs), "input offsets committed past records whose output was never committed: data loss")
	require.ErrorIs(t, rerr, kafka.ErrNotOpen)
	require.NoError(t, cerr)
	for i, err := range em.errs {
		assert.NoError(t, err, "Write %d", i)
	}
	assert.Equal(t, []int64{0, 1, 0}, []int64{src.Commits(), src.Aborts(), src.Unknowns()})
	// A restart reads the three again, and commits each output once.
	eo2, _ := env.newEO(t)
	src2 := eo2.Source()
	require.NoError(t, src2.Open(testContext(t)))
	require.NoError(t, src2.Run(testContext(t), &stopAfter{inner: &hookEmitter{sink: eo2.Sink()}, n: 3, stop: src2.Stop}))
	require.NoError(t, src2.Close(context.Background()))
	assert.Equal(t, int64(3), env.a.committed(env.in, env.in)[0])
	assert.Equal(t, 3, readCommittedCount(t, env.c.ListenAddrs(), env.out, time.Second))
}

// Open called a second time while Run is still in progress (between two
// records of one poll) aborts the first session's epoch and ends the Run;
// the records Run still emits are of the ended epoch, and their Writes
// return nil (not produced; read again), as the sink's godoc says. The
// old code failed them permanently with ErrNotOpen, which in a pipeline
// fails or dead-letters the item.
func TestExactlyOnceOpenDuringRunLeavesItsWritesStale(t *testing.T) {
	env := takeoverSetup(t, 3)
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	var oerr error
	em := &hookEmitter{sink: env.eo.Sink()}
	em.hook = func() { oerr = src.Open(testContext(t)) }
	rerr := src.Run(testContext(t), em)
	t.Logf("Run: %v; second Open: %v; Write errors: %v; commits %d aborts %d unknowns %d",
		rerr, oerr, em.errs, src.Commits(), src.Aborts(), src.Unknowns())
	require.NoError(t, oerr)
	require.ErrorIs(t, rerr, kafka.ErrNotOpen)
	assert.Equal(t, int64(1), src.Aborts())
	for i, err := range em.errs[1:] {
		assert.NoError(t, err, "Write of record %d of the aborted epoch", i+1)
	}
	require.NoError(t, src.Close(context.Background()))
}

// Close while Run waits for the epoch's records to settle (its
// CommitInterval passed) aborts the epoch and ends the Run, which begins
// no epoch on the closed session: the next Open and Run count one abort
// and one commit. The old code began a transaction on the closed session
// and left its epoch for the next Open and Run to end (Aborts() 2).
func TestExactlyOnceCloseWhileRunWaitsBeginsNoEpoch(t *testing.T) {
	env := takeoverSetup(t, 3)
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	hold := &holdAllEmitter{}
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(testContext(t), hold) }()
	waitWithin(t, 10*time.Second, func() bool { return hold.count() == 3 }, func() string { return "3 records not emitted" })
	env.clock.BlockUntilContext(testContext(t), 1)
	env.clock.Advance(2 * time.Hour) // the epoch's time is up: Run waits for the 3 to settle
	waitForStacks(t, "Run waiting for its records to settle", "(*TransactSource).waitSettled")
	cerr := src.Close(context.Background())
	t.Logf("Close: %v; aborts %d", cerr, src.Aborts())
	hold.settle(node.Delivered)
	rerr := <-runDone
	t.Logf("Run: %v", rerr)
	require.NoError(t, src.Open(testContext(t)))
	// Between Open and Run, a Write for a new record is admitted into
	// the stale epoch (an item not of this source's records, as any T
	// but Message would be): it should be refused as not open.
	werr := env.eo.Sink().Write(testContext(t), kafka.Message{Topic: env.in, Partition: 0, Offset: 0, Deliveries: 99})
	t.Logf("Write between Open and Run: %v", werr)
	ctx, cancel := context.WithCancel(testContext(t))
	em := &countingEmitter{stop: cancel, n: 3}
	t.Logf("second Run: %v", src.Run(ctx, em))
	t.Logf("commits %d aborts %d unknowns %d", src.Commits(), src.Aborts(), src.Unknowns())
	_ = src.Close(context.Background())
	t.Logf("after the second Close: commits %d aborts %d", src.Commits(), src.Aborts())
	assert.Equal(t, int64(1), src.Commits(), "the second run's epoch settled: its Close commits it")
	assert.Equal(t, int64(1), src.Aborts(), "one epoch aborted (the first Close's); the stale epoch Run began on the closed session held nothing")
}

// A holdAllEmitter holds the done of every message until settle.
type holdAllEmitter struct {
	delivered
	heldDones
}

func (h *holdAllEmitter) EmitTracked(_ context.Context, _ kafka.Message, done func(node.Outcome)) error {
	h.mu.Lock()
	h.held = append(h.held, done)
	h.mu.Unlock()
	return nil
}

func (h *holdAllEmitter) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

func (h *holdAllEmitter) settle(o node.Outcome) {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, d := range held {
		d(o)
	}
}

// As TestExactlyOnceCloseWhileRunWaitsBeginsNoEpoch, with items that are
// not the Messages (T is string): after the Close and a new Open, and
// before a Run, no transaction is open, and a Write is refused with
// ErrNotOpen. The old code admitted it into the epoch Run had begun on
// the closed session, and produced it on the new client outside any
// transaction.
func TestExactlyOnceNoEpochAdmitsAfterATakeOver(t *testing.T) {
	env := takeoverSetup(t, 3)
	clock := clockwork.NewFakeClock()
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[string]{Brokers: env.c.ListenAddrs(), Topic: env.in, Group: env.in,
		TransactionalID: env.in + "-txn", Output: env.out, Record: func(s string) (*kgo.Record, error) { return &kgo.Record{Value: []byte(s)}, nil },
		Clock: clock, CommitInterval: time.Hour, AckTimeout: 2 * time.Second, MaxInFlight: 32, CloseTimeout: 2 * time.Second,
		SessionTimeout: 6 * time.Second})
	require.NoError(t, err)
	src := eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	hold := &holdAllEmitter{}
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(testContext(t), hold) }()
	waitWithin(t, 10*time.Second, func() bool { return hold.count() == 3 }, func() string { return "3 records not emitted" })
	clock.BlockUntilContext(testContext(t), 1)
	clock.Advance(2 * time.Hour)
	waitForStacks(t, "Run waiting for its records to settle", "(*TransactSource).waitSettled")
	t.Logf("Close: %v", src.Close(context.Background()))
	hold.settle(node.Failed)
	t.Logf("Run: %v", <-runDone)
	w1 := eo.Sink().Write(testContext(t), "after-close")
	t.Logf("Write after Close: %v", w1)
	require.NoError(t, src.Open(testContext(t)))
	w2 := eo.Sink().Write(testContext(t), "after-reopen")
	t.Logf("Write after reopen, before Run: %v", w2)
	_ = src.Close(context.Background())
	assert.ErrorIs(t, w2, kafka.ErrNotOpen, "no transaction is open before Run: the admit should refuse, not admit into the stale epoch")
}

// Close with a cancelled context after Stop still commits the settled
// epoch (the end is bounded by CloseTimeout, not ctx), and Close twice is
// a no-op.
func TestExactlyOnceCloseCancelledContextAndTwice(t *testing.T) {
	env := takeoverSetup(t, 3)
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	require.NoError(t, src.Run(testContext(t), &stopAfter{inner: &hookEmitter{sink: env.eo.Sink()}, n: 3, stop: src.Stop}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, src.Close(ctx))
	require.NoError(t, src.Close(ctx))
	assert.Equal(t, int64(1), src.Commits())
	assert.Equal(t, int64(3), env.a.committed(env.in, env.in)[0])
	assert.Equal(t, 3, readCommittedCount(t, env.c.ListenAddrs(), env.out, time.Second))
}

// stopAfter passes each message to inner, and calls stop after the n-th.
type stopAfter struct {
	delivered
	inner node.Emitter[kafka.Message]
	mu    sync.Mutex
	seen  int
	n     int
	stop  func()
}

func (e *stopAfter) EmitTracked(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
	err := e.inner.EmitTracked(ctx, m, done)
	e.mu.Lock()
	e.seen++
	last := e.seen == e.n
	e.mu.Unlock()
	if last {
		e.stop()
	}
	return err
}

// A second Run while one runs is refused at once, with a permanent error
// that is not ErrNotOpen, and the first goes on: both would poll the one
// client and end each other's epochs (the records the first polled after
// the second began were committed by the second's epoch, without their
// outputs). The first then commits every output once.
func TestExactlyOnceSecondRunIsRefused(t *testing.T) {
	env := takeoverSetup(t, 6)
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	write := &hookEmitter{sink: env.eo.Sink()}
	em := &stopAfter{inner: &funcEmitter{f: func(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
		once.Do(func() { close(blocked); <-release })
		return write.EmitTracked(ctx, m, done)
	}}, n: 6, stop: src.Stop}
	first := make(chan error, 1)
	go func() { first <- src.Run(testContext(t), em) }()
	<-blocked
	err := src.Run(testContext(t), &hookEmitter{sink: env.eo.Sink()})
	require.Error(t, err)
	assert.False(t, resilience.IsTransient(err), "%v", err)
	assert.NotErrorIs(t, err, kafka.ErrNotOpen)
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, src.Close(context.Background()))
	assert.Equal(t, []int64{1, 0}, []int64{src.Commits(), src.Aborts()})
	assert.Equal(t, int64(6), env.a.committed(env.in, env.in)[0])
	assert.Equal(t, 6, readCommittedCount(t, env.c.ListenAddrs(), env.out, time.Second))
}
