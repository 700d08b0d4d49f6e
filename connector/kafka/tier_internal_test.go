package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fakePauser is the client's pause and resume, recorded.
type fakePauser struct {
	mu     sync.Mutex
	paused map[topicPartition]bool
	pauses int
}

func (f *fakePauser) PauseFetchPartitions(m map[string][]int32) map[string][]int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			f.paused[topicPartition{t, p}] = true
			f.pauses++
		}
	}
	return nil
}

func (f *fakePauser) ResumeFetchPartitions(m map[string][]int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			delete(f.paused, topicPartition{t, p})
		}
	}
}

func (f *fakePauser) isPaused(topic string, p int32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused[topicPartition{topic, p}]
}

// gateRig runs a dueGate on a fake clock, and collects what it releases.
type gateRig struct {
	clock  *clockwork.FakeClock
	pause  *fakePauser
	gate   *dueGate[*kgo.Record]
	out    chan *kgo.Record
	cancel context.CancelFunc
	done   chan error
}

func newGateRig(t *testing.T) *gateRig {
	r := &gateRig{clock: clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		pause: &fakePauser{paused: map[topicPartition]bool{}}, out: make(chan *kgo.Record, 64), done: make(chan error, 1)}
	r.gate = newDueGate(r.clock, r.pause, kgoTP, func(ctx context.Context, rec *kgo.Record) error {
		select {
		case r.out <- rec:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.gate.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func kgoTP(r *kgo.Record) topicPartition { return topicPartition{r.Topic, r.Partition} }

func rec(topic string, p int32, off int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Offset: off}
}

// expect takes the next released record, failing t when none comes in a
// bounded real wait (the gate's goroutine runs on its own).
func (r *gateRig) expect(t *testing.T) *kgo.Record {
	t.Helper()
	select {
	case got := <-r.out:
		return got
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the gate released nothing")
		return nil
	}
}

// nothing checks that the gate released nothing: it waits until the
// gate's goroutine is parked on its timer again.
func (r *gateRig) nothing(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, r.clock.BlockUntilContext(ctx, 1))
	select {
	case got := <-r.out:
		assert.Failf(t, "released too early", "%s/%d@%d", got.Topic, got.Partition, got.Offset)
	default:
	}
}

// advance moves the clock once the gate waits on its timer.
func (r *gateRig) advance(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, r.clock.BlockUntilContext(ctx, 1))
	r.clock.Advance(d)
}

// A due record with nothing held before it goes on at once; one not due
// is held, its partition paused, and released at its due time, not
// before, and the partition resumed.
func TestDueGateHoldsUntilDue(t *testing.T) {
	t.Parallel()
	r := newGateRig(t)
	now := r.clock.Now()
	assert.True(t, r.gate.offer(rec("t.retry.1s", 0, 1), now), "a record due now goes on")
	assert.True(t, r.gate.offer(rec("t.retry.1s", 0, 2), time.Time{}), "a record with no due time goes on")
	assert.False(t, r.gate.offer(rec("t.retry.1s", 0, 3), now.Add(time.Second)))
	assert.True(t, r.pause.isPaused("t.retry.1s", 0), "the partition of a held record is paused")
	r.advance(t, 999*time.Millisecond)
	r.nothing(t)
	assert.True(t, r.pause.isPaused("t.retry.1s", 0))
	r.advance(t, time.Millisecond)
	got := r.expect(t)
	assert.Equal(t, int64(3), got.Offset)
	assert.Eventually(t, func() bool { return !r.pause.isPaused("t.retry.1s", 0) }, 5*time.Second, time.Millisecond,
		"the partition is resumed once nothing of it is held")
	assert.Zero(t, r.gate.heldCount())
}

// Records behind a held head wait for it, in order, even when they are
// due sooner; each goes at the later of its own due time and its
// predecessor's.
func TestDueGateKeepsPartitionOrder(t *testing.T) {
	t.Parallel()
	r := newGateRig(t)
	now := r.clock.Now()
	require.False(t, r.gate.offer(rec("t.retry.5s", 0, 10), now.Add(5*time.Second)))
	require.False(t, r.gate.offer(rec("t.retry.5s", 0, 11), now.Add(time.Second)), "due sooner, but behind a held record")
	require.False(t, r.gate.offer(rec("t.retry.5s", 0, 12), now.Add(7*time.Second)))
	r.advance(t, time.Second)
	r.nothing(t)
	r.advance(t, 4*time.Second)
	assert.Equal(t, int64(10), r.expect(t).Offset)
	assert.Equal(t, int64(11), r.expect(t).Offset)
	r.nothing(t)
	assert.True(t, r.pause.isPaused("t.retry.5s", 0), "still paused: offset 12 is not due")
	r.advance(t, 2*time.Second)
	assert.Equal(t, int64(12), r.expect(t).Offset)
}

// A tier partition whose head is not due holds back nothing of another
// partition: a due record of another partition goes on at once, and a
// held record of another partition that comes due first is released
// first.
func TestDueGateOtherPartitionsGoOn(t *testing.T) {
	t.Parallel()
	r := newGateRig(t)
	now := r.clock.Now()
	require.False(t, r.gate.offer(rec("t.retry.30s", 0, 1), now.Add(30*time.Second)))
	assert.True(t, r.gate.offer(rec("t.retry.30s", 1, 1), now), "another partition of the tier is not held back")
	assert.True(t, r.gate.offer(rec("t.retry.1s", 0, 1), now), "another tier is not held back")
	require.False(t, r.gate.offer(rec("t.retry.1s", 0, 2), now.Add(time.Second)))
	assert.False(t, r.pause.isPaused("t.retry.30s", 1))
	r.advance(t, time.Second)
	got := r.expect(t)
	assert.Equal(t, "t.retry.1s", got.Topic, "the record due first is released first")
	r.nothing(t)
	r.advance(t, 29*time.Second)
	assert.Equal(t, "t.retry.30s", r.expect(t).Topic)
}

// A record the poll loop offers while its partition's records are
// released waits behind them.
func TestDueGateOfferWhileReleasing(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	p := &fakePauser{paused: map[topicPartition]bool{}}
	entered, proceed := make(chan struct{}), make(chan struct{})
	var got []int64
	gate := newDueGate(clock, p, kgoTP, func(_ context.Context, rec *kgo.Record) error {
		if rec.Offset == 1 {
			close(entered)
			<-proceed
		}
		got = append(got, rec.Offset)
		return nil
	})
	require.False(t, gate.offer(rec("t.retry.1s", 0, 1), clock.Now().Add(time.Second)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gate.run(ctx) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Second)
	<-entered
	assert.False(t, gate.offer(rec("t.retry.1s", 0, 2), clock.Now()), "due, but its partition is being released")
	close(proceed)
	assert.Eventually(t, func() bool { return gate.heldCount() == 0 && !p.isPaused("t.retry.1s", 0) }, 5*time.Second, time.Millisecond)
	cancel()
	<-done
	assert.Equal(t, []int64{1, 2}, got)
}

// A run that ends while a record is released gives it back; drop returns
// what is held, in order, and resumes the partitions.
func TestDueGateCancelAndDrop(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	p := &fakePauser{paused: map[topicPartition]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	gate := newDueGate(clock, p, kgoTP, func(ctx context.Context, _ *kgo.Record) error {
		cancel()
		return context.Cause(ctx)
	})
	due := clock.Now().Add(time.Second)
	require.False(t, gate.offer(rec("t.retry.1s", 0, 1), due))
	require.False(t, gate.offer(rec("t.retry.1s", 0, 2), due))
	require.False(t, gate.offer(rec("t.retry.1s", 3, 7), due.Add(time.Hour)))
	done := make(chan error, 1)
	go func() { done <- gate.run(ctx) }()
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(time.Second)
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, 3, gate.heldCount(), "what release did not take is held again")
	var offs []int64
	for _, r := range gate.drop(map[string][]int32{"t.retry.1s": {0}}) {
		offs = append(offs, r.Offset)
	}
	assert.Equal(t, []int64{1, 2}, offs, "dropped in order")
	assert.False(t, p.isPaused("t.retry.1s", 0))
	assert.True(t, p.isPaused("t.retry.1s", 3))
	assert.Len(t, gate.dropAll(), 1)
	assert.False(t, p.isPaused("t.retry.1s", 3))
	assert.Zero(t, gate.heldCount())
}

// A record offered after its partition was revoked (the revoke's drop
// already passed: the poll returned it before the revoke) is neither held
// nor its partition paused: a pause then would outlive the revoke into the
// partition's next assignment, and nothing would resume it. A record of a
// partition still owned is held as before.
func TestDueGateRevokedPartitionNotPaused(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	p := &fakePauser{paused: map[topicPartition]bool{}}
	gate := newDueGate(clock, p, kgoTP, func(context.Context, *kgo.Record) error { return nil })
	gate.gone = func(r *kgo.Record) bool { return r.Partition == 0 }
	due := clock.Now().Add(time.Hour)
	assert.True(t, gate.offer(rec("t.retry.1h", 0, 1), due), "handed back to be dropped")
	assert.False(t, p.isPaused("t.retry.1h", 0))
	assert.Zero(t, gate.heldCount())
	assert.False(t, gate.offer(rec("t.retry.1h", 1, 1), due), "an owned partition's record waits")
	assert.True(t, p.isPaused("t.retry.1h", 1))
	assert.Equal(t, 1, gate.heldCount())
}

// The tracker reports a partition being revoked, lost or retired as
// gone, and one assigned as not.
func TestTrackerRevoking(t *testing.T) {
	t.Parallel()
	tk := newOffsetTracker()
	tk.assign("t", []int32{0, 1})
	tr0, _ := tk.add("t", 0, 5, 0)
	tr1, _ := tk.add("t", 1, 5, 0)
	require.NotNil(t, tr0)
	require.NotNil(t, tr1)
	assert.False(t, tk.revoking(tr0))
	tk.revoke("t", []int32{0})
	assert.True(t, tk.revoking(tr0), "being revoked")
	assert.False(t, tk.revoking(tr1))
	tk.retire(tk.revoke("t", []int32{1}))
	assert.True(t, tk.revoking(tr1), "retired")
}

// advancingClock is a fake clock that, once armed, moves d forward right
// after a Now read: what a test's Advance does when it runs between a
// goroutine's read of the time and its timer's start.
type advancingClock struct {
	*clockwork.FakeClock
	armed atomic.Bool
	d     time.Duration
}

func (c *advancingClock) Now() time.Time {
	now := c.FakeClock.Now()
	if c.armed.CompareAndSwap(true, false) {
		c.FakeClock.Advance(c.d)
	}
	return now
}

// A record held until due is released when the clock passes its due time
// between the gate's read of the time and its timer's start: the timer
// would otherwise wait its whole delay again from the later time, and
// the record would never come (as TestRedeliveredSkipsHandOffs did on a
// busy machine).
func TestDueGateClockMovesBeforeTheTimer(t *testing.T) {
	clock := &advancingClock{FakeClock: clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), d: 5 * time.Second}
	out := make(chan *kgo.Record, 1)
	gate := newDueGate(clock, &fakePauser{paused: map[topicPartition]bool{}}, kgoTP, func(_ context.Context, rec *kgo.Record) error {
		out <- rec
		return nil
	})
	// Held first, with the gate not running: its first loop reads the
	// time (and the clock moves past the due time) before its timer.
	require.False(t, gate.offer(rec("t", 0, 7), clock.FakeClock.Now().Add(5*time.Second)))
	clock.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gate.run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case got := <-out:
		assert.Equal(t, int64(7), got.Offset)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the record due during the timer's start was never released")
	}
}

// A tier record is due when its copy says, but never later than its
// tier's delay from when the source read it; a zero due time is now.
func TestTierDueBoundedByTheTiersDelay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name          string
		carried, want time.Time
	}{
		{"none", time.Time{}, time.Time{}},
		{"past", now.Add(-time.Hour), now.Add(-time.Hour)},
		{"within the delay", now.Add(30 * time.Second), now.Add(30 * time.Second)},
		{"at the delay", now.Add(time.Minute), now.Add(time.Minute)},
		{"past the delay", now.Add(time.Minute + 1), now.Add(time.Minute)},
		{"30 days ahead", now.Add(30 * 24 * time.Hour), now.Add(time.Minute)},
	} {
		assert.Equal(t, c.want, tierDue(c.carried, now, time.Minute), c.name)
	}
}
