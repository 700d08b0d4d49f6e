package nats_test

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

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/pipeline"
)

// A stallRun is a pipeline consume -> Batch(8, 0) -> store over a stream,
// with a crash ledger that suspects some of its messages.
type stallRun struct {
	t      *testing.T
	a      *admin
	name   string
	ledger string
	clock  *clockwork.FakeClock
	src    *nats.Source
	p      *pipeline.Pipeline
	dead   *deadletter.Memory
	// pullWait is the source's PullWait.
	pullWait time.Duration

	mu      sync.Mutex
	written map[string]int
	total   int
}

// newStallRun publishes n messages and writes the crash ledger that a
// process which died with the messages at seqs in flight leaves behind.
func newStallRun(t *testing.T, n int, seqs ...uint64) *stallRun {
	t.Helper()
	r := &stallRun{t: t, a: newAdmin(t), name: uniqueName(t), ledger: filepath.Join(t.TempDir(), "crash.ledger"),
		clock: clockwork.NewFakeClock(), dead: deadletter.NewMemory(16), written: map[string]int{}}
	r.a.publish(r.a.stream(r.name), ids(n)...)
	ctx := testContext(t)
	st, err := r.a.js.Stream(ctx, r.name)
	require.NoError(t, err)
	b := []byte("sluice crash ledger v1\n")
	for _, seq := range seqs {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		id := r.name + "/" + strconv.FormatUint(seq, 10) + "@" + strconv.FormatInt(m.Time.UnixNano(), 10)
		b = append(b, "+ "+strconv.Quote(id)+"\n"...)
	}
	require.NoError(t, os.WriteFile(r.ledger, b, 0o644))

	cfg := r.a.config(r.name)
	cfg.AckWait, cfg.Batch, cfg.CrashLedger, cfg.Clock = time.Minute, 32, r.ledger, r.clock
	// PullWait stays short (a second, from config): a run that ends while
	// its pull request waits at the server gives its messages back with a
	// nak delayed until the request would have expired, in real time.
	cfg.CrashAloneWait = stallWait
	r.pullWait = cfg.PullWait
	r.src, err = nats.NewSource(cfg)
	require.NoError(t, err)
	pb := pipeline.New("stall", pipeline.WithDeadLetter(r.dead))
	pipeline.ForEach(pb, "store", pipeline.Batch(pb, "batch", pipeline.Source(pb, "consume", r.src), 8, 0),
		func(_ context.Context, ms []nats.Message) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, m := range ms {
				r.written[string(m.Data)]++
				r.total++
			}
			return nil
		})
	r.p, err = pb.Build()
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

// stallWait is the tests' CrashAloneWait.
const stallWait = time.Second

// pollUntil polls cond every few milliseconds until it holds; it reports
// false after ten seconds.
func pollUntil(cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// pumpUntil moves the fake clock on by a hundredth of CrashAloneWait
// every few milliseconds, until cond holds. Past a pull's guard
// (PullWait and the watchdog's probeAfter, on the source's clock) the source gives the
// request up and asks again; nothing is nak'd meanwhile.
func (r *stallRun) pumpUntil(cond func() bool) bool {
	return pollUntil(func() bool {
		if cond() {
			return true
		}
		r.clock.Advance(stallWait / 100)
		return false
	})
}

// A suspect of a crash must not stall a pipeline that holds items until
// more come (a Batch without linger): the first suspect arrives when
// nothing runs, runs alone, and sits in a partial batch; the second
// arrives while a partial batch is held. Neither may wait for ever: after
// the ledger's bound (on the source's clock) each runs beside the others,
// every message is written once, and both suspects, settled, are cleared.
func TestCrashSuspectsDoNotStallABatchWithoutLinger(t *testing.T) {
	t.Parallel()
	// Sixteen messages, two full batches: the run ends with nothing left
	// to pull, so that no pull still open at the drain can hold a message
	// until AckWait.
	r := newStallRun(t, 16, 1, 11)
	done := r.run(testContext(t))
	require.True(t, r.pumpUntil(func() bool { return r.count() >= 16 }),
		"two full batches written past two suspects; written %d of 16", r.count())
	require.True(t, r.p.Drain(), "the run is on")
	require.NoError(t, <-done)

	assert.Equal(t, 1, r.written["m-00000"], "the suspect that ran alone is written")
	assert.Equal(t, 1, r.written["m-00010"], "the suspect that waited is written")
	for _, id := range ids(16) {
		assert.Equal(t, 1, r.written[id], "message %s written once", id)
	}
	assert.Empty(t, r.dead.Envelopes(), "nothing dead-lettered")
	l, err := crashledger.Open(r.ledger, crashledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	assert.Zero(t, l.Suspects(), "the suspects, settled, are cleared")
}

// stalledSuspect starts a run whose suspect m-00005 waits behind five
// messages held in a partial batch, and waits until it does.
func stalledSuspect(t *testing.T, ctx context.Context) (*stallRun, <-chan error) {
	t.Helper()
	r := newStallRun(t, 6, 6)
	done := r.run(ctx)
	require.True(t, pollUntil(func() bool { return nats.CrashWaiting(r.src) == 1 }),
		"the suspect waits for its turn")
	return r, done
}

// checkBack checks, after the run, that nothing is lost: what the run
// wrote and what a next consumer gets make every message once, and the
// suspect comes back, still a suspect, within PullWait (and a margin)
// of real time: the run gave up a pull request that waited at the
// server, and its naks wait until that request would have expired.
func (r *stallRun) checkBack(n int) {
	t := r.t
	t.Helper()
	_, ok := r.written["m-00005"]
	assert.False(t, ok, "the suspect did not run")
	assert.Empty(t, r.dead.Envelopes(), "nothing dead-lettered")
	start := time.Now()
	back := collect(t, r.a, r.name, n-len(r.written))
	took := time.Since(start)
	// Naked back, not left for AckWait (a minute): the bound leaves room
	// for a loaded machine (6 s seen under CI's parallel packages) and is
	// still far below AckWait.
	assert.Less(t, took, r.pullWait+20*time.Second, "the rest came back %s after the run (PullWait %s, AckWait 1m)", took, r.pullWait)
	assert.Equal(t, 1, back["m-00005"], "the suspect comes back")
	for _, id := range ids(n) {
		assert.Equal(t, 1, r.written[id]+back[id], "message %s written or back, once", id)
	}
	l, err := crashledger.Open(r.ledger, crashledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, 1, l.Suspects(), "still a suspect")
}

// A drain while a suspect waits for the held batch ends at once, on the
// fake clock that never moves: the batch is written, the suspect is not
// emitted and is given back, still a suspect.
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
// once: the suspect is not emitted and is given back, still a suspect.
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
