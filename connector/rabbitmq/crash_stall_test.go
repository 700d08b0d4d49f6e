package rabbitmq_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/pipeline"
)

// crashedLedger writes, at path, the crash ledger that a process which
// died with the messages ids in flight leaves behind.
func crashedLedger(t *testing.T, path string, ids ...string) {
	t.Helper()
	b := []byte("sluice crash ledger v1\n")
	for _, id := range ids {
		b = append(b, "+ "+strconv.Quote(id)+"\n"...)
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// A stallRun is a pipeline consume -> Batch(8, 0) -> store over a queue,
// with a crash ledger that suspects some of its messages.
type stallRun struct {
	t      *testing.T
	a      *admin
	q      string
	ledger string
	clock  *clockwork.FakeClock
	src    *rabbitmq.Source
	p      *pipeline.Pipeline
	dead   *deadletter.Memory

	mu      sync.Mutex
	written map[string]int
	total   int
}

// stallWait is the tests' CrashAloneWait.
const stallWait = time.Minute

func newStallRun(t *testing.T, n int, suspects ...string) *stallRun {
	t.Helper()
	r := &stallRun{t: t, a: newAdmin(t), q: uniqueName(t), ledger: filepath.Join(t.TempDir(), "crash.ledger"),
		clock: clockwork.NewFakeClock(), dead: deadletter.NewMemory(16), written: map[string]int{}}
	r.a.declareQueue(r.q, nil)
	r.a.publish(r.q, ids(n)...)
	var inFlight []string
	for _, s := range suspects {
		inFlight = append(inFlight, "id:"+s)
	}
	crashedLedger(t, r.ledger, inFlight...)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: r.a.url, Queue: r.q, Prefetch: 32,
		CrashLedger: r.ledger, CrashAloneWait: stallWait, Clock: r.clock})
	require.NoError(t, err)
	r.src = src
	b := pipeline.New("stall", pipeline.WithDeadLetter(r.dead))
	pipeline.ForEach(b, "store", pipeline.Batch(b, "batch", pipeline.Source(b, "consume", src), 8, 0),
		func(_ context.Context, ms []rabbitmq.Message) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, m := range ms {
				r.written[m.MessageID]++
				r.total++
			}
			return nil
		})
	r.p, err = b.Build()
	require.NoError(t, err)
	return r
}

// run starts the pipeline; the channel gets Run's error.
func (r *stallRun) run(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := r.p.Run(ctx)
		done <- err
	}()
	return done
}

func (r *stallRun) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// pumpUntil moves the source's fake clock on by step, every few
// milliseconds, until cond holds; it reports false at ctx's deadline.
func pumpUntil(ctx context.Context, clock *clockwork.FakeClock, step time.Duration, cond func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			if step > 0 {
				clock.Advance(step)
			}
		}
	}
	return true
}

// A suspect of a crash must not stall a pipeline that holds items until
// more come (a Batch without linger): the first suspect arrives when
// nothing runs, runs alone, and sits in a partial batch; the second
// arrives while a partial batch is held. Neither may wait for ever: after
// the ledger's bound (on the source's clock) each runs beside the others,
// every message is written once, and both suspects, settled, are cleared.
func TestCrashSuspectsDoNotStallABatchWithoutLinger(t *testing.T) {
	t.Parallel()
	r := newStallRun(t, 20, "m-00000", "m-00010")
	ctx := testContext(t)
	done := r.run(ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.True(t, pumpUntil(wctx, r.clock, stallWait/4, func() bool { return r.count() >= 16 }),
		"two full batches written past two suspects; written %d of 20", r.count())
	require.True(t, r.p.Drain(), "the run is on")
	require.NoError(t, <-done)

	assert.Equal(t, 1, r.written["m-00000"], "the suspect that ran alone is written")
	assert.Equal(t, 1, r.written["m-00010"], "the suspect that waited is written")
	// What the drain stopped before it was emitted is back in the queue.
	back := r.back()
	for _, id := range ids(20) {
		assert.Equal(t, 1, r.written[id]+back[id], "message %s written or back, once", id)
	}
	assert.Empty(t, r.dead.Envelopes(), "nothing dead-lettered")
	l, err := crashledger.Open(r.ledger, crashledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	assert.Zero(t, l.Suspects(), "the suspects, settled, are cleared")
}

// waitUntil polls cond every few milliseconds, and fails the test when it
// does not hold within ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.True(t, pumpUntil(ctx, nil, 0, cond), "timed out waiting for %s", what)
}

// stalledSuspect starts a run whose suspect m-00005 waits behind five
// messages held in a partial batch, and waits until it does.
func stalledSuspect(t *testing.T, ctx context.Context) (*stallRun, <-chan error) {
	t.Helper()
	r := newStallRun(t, 6, "m-00005")
	done := r.run(ctx)
	waitUntil(t, "the suspect waiting for its turn", func() bool { return rabbitmq.CrashWaiting(r.src) == 1 })
	return r, done
}

// back takes what is left in the queue, and counts it by message id.
func (r *stallRun) back() map[string]int {
	r.t.Helper()
	ch := r.a.channel()
	back := map[string]int{}
	for {
		d, ok, err := ch.Get(r.q, true)
		require.NoError(r.t, err)
		if !ok {
			return back
		}
		back[d.MessageId]++
	}
}

// checkBack checks, after the run, that nothing is lost: what the run
// wrote and what is back in the queue make every message once, and the
// suspect is back in the queue, still a suspect.
func (r *stallRun) checkBack(n int) {
	t := r.t
	t.Helper()
	_, ok := r.written["m-00005"]
	assert.False(t, ok, "the suspect did not run")
	back := r.back()
	assert.Equal(t, 1, back["m-00005"], "the suspect is back in the queue")
	for _, id := range ids(n) {
		assert.Equal(t, 1, r.written[id]+back[id], "message %s written or back, once", id)
	}
	assert.Empty(t, r.dead.Envelopes(), "nothing dead-lettered")
	l, err := crashledger.Open(r.ledger, crashledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, crashledger.Suspect, l.Entry("id:m-00005").Verdict(), "still a suspect")
}

// A drain while a suspect waits for the held batch ends at once, on the
// fake clock that never moves: the batch is written, the suspect is not
// emitted and goes back to the queue, still a suspect.
func TestCrashSuspectWaitingEndsWithADrain(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	r, done := stalledSuspect(t, ctx)
	require.True(t, r.p.Drain())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the drain hangs behind the waiting suspect")
	}
	assert.Equal(t, 5, r.count(), "the held batch is written")
	r.checkBack(6)
}

// Cancelling the run while a suspect waits for the held batch ends it at
// once: the suspect is not emitted and goes back to the queue, still a
// suspect; what the batch held goes back too, unacked.
func TestCrashSuspectWaitingEndsWithTheRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	r, done := stalledSuspect(t, ctx)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-testContext(t).Done():
		t.Fatal("the run hangs behind the waiting suspect")
	}
	r.checkBack(6)
}

// CrashAloneWait: negative is an error naming the field; 0 takes the
// default.
func TestCrashAloneWaitConfig(t *testing.T) {
	t.Parallel()
	_, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q", CrashAloneWait: -1})
	var ce *rabbitmq.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "CrashAloneWait", ce.Field)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q"})
	require.NoError(t, err)
	assert.Equal(t, rabbitmq.DefaultCrashAloneWait, src.Config().CrashAloneWait)
}
