package kafka

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dueMap returns what the tracker would commit, by partition.
func dueMap(t *offsetTracker) map[int32]int64 {
	out := map[int32]int64{}
	for _, c := range t.due() {
		out[c.tp.partition] = c.offset
	}
	return out
}

// addAll adds offsets of partition p and returns their entries.
func addAll(t *testing.T, tr *offsetTracker, p int32, offsets ...int64) (*partitionTrack, []*trackEntry) {
	t.Helper()
	var track *partitionTrack
	var es []*trackEntry
	for _, o := range offsets {
		pt, e := tr.add("t", p, o, 7)
		require.NotNil(t, e, "offset %d added", o)
		track = pt
		es = append(es, e)
	}
	return track, es
}

func settleAll(tr *offsetTracker, pt *partitionTrack, es ...*trackEntry) {
	for _, e := range es {
		tr.emit(pt, e)
		tr.end(pt, e, true)
	}
}

func TestTrackerEmpty(t *testing.T) {
	tr := newOffsetTracker()
	assert.Empty(t, tr.due(), "nothing assigned, nothing to commit")
	tr.assign("t", []int32{0, 1})
	assert.Empty(t, tr.due(), "assigned and nothing polled: nothing to commit")
	assert.Zero(t, tr.pending())
	assert.Zero(t, tr.inFlight())
	pt, e := tr.add("t", 2, 0, 0)
	assert.Nil(t, pt, "a partition not assigned takes no record")
	assert.Nil(t, e)
}

func TestTrackerOne(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 41)
	assert.Empty(t, tr.due(), "polled, not settled: nothing to commit")
	require.True(t, tr.emit(pt, es[0]))
	assert.Equal(t, 1, tr.inFlight())
	tr.end(pt, es[0], true)
	assert.Equal(t, map[int32]int64{0: 42}, dueMap(tr), "the next offset to read")
	assert.Equal(t, 1, tr.pending())
	c := tr.due()
	assert.Equal(t, int32(7), c[0].epoch, "the leader epoch of the record below the offset")
	tr.committed(c)
	assert.Empty(t, tr.due(), "committed: nothing moved since")
	assert.Zero(t, tr.pending())
	assert.Zero(t, tr.inFlight())
}

func TestTrackerOutOfOrder(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 0, 1, 2, 3, 4)
	for _, e := range es {
		tr.emit(pt, e)
	}
	tr.end(pt, es[3], true)
	tr.end(pt, es[1], true)
	assert.Empty(t, tr.due(), "offset 0 is in flight: nothing past it commits")
	tr.end(pt, es[0], true)
	assert.Equal(t, map[int32]int64{0: 2}, dueMap(tr), "0 and 1 settled, 2 not")
	assert.Equal(t, 2, tr.pending(), "3 settled but is behind 2: not covered by the next commit")
	tr.end(pt, es[2], true)
	assert.Equal(t, map[int32]int64{0: 4}, dueMap(tr))
	tr.end(pt, es[4], true)
	assert.Equal(t, map[int32]int64{0: 5}, dueMap(tr))
	assert.Zero(t, tr.inFlight())
}

func TestTrackerFailedHoldsThePartition(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0, 1})
	p0, es0 := addAll(t, tr, 0, 10, 11, 12)
	p1, es1 := addAll(t, tr, 1, 5, 6)
	settleAll(tr, p0, es0[0])
	tr.emit(p0, es0[1])
	tr.end(p0, es0[1], false) // Failed: ended, not settled
	settleAll(tr, p0, es0[2])
	settleAll(tr, p1, es1...)
	assert.Equal(t, map[int32]int64{0: 11, 1: 7}, dueMap(tr),
		"the failed record and everything after it in its partition stay uncommitted; the other partition goes on")
	assert.Zero(t, tr.inFlight(), "a failed record is no longer in flight")
	tr.end(p0, es0[1], true)
	assert.Equal(t, map[int32]int64{0: 11, 1: 7}, dueMap(tr), "an entry ends once: a second outcome changes nothing")
}

func TestTrackerGaps(t *testing.T) {
	// Compacted topics and transaction markers leave gaps in offsets.
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 3, 9, 10, 20)
	settleAll(tr, pt, es[0], es[1])
	assert.Equal(t, map[int32]int64{0: 10}, dueMap(tr), "past the gap, to the lowest unsettled")
	settleAll(tr, pt, es[3])
	assert.Equal(t, map[int32]int64{0: 10}, dueMap(tr))
	settleAll(tr, pt, es[2])
	assert.Equal(t, map[int32]int64{0: 21}, dueMap(tr), "one past the last record, not past the gap after it")
	_, e := tr.add("t", 0, 15, 0)
	assert.Nil(t, e, "an offset below one already added is refused")
	_, e = tr.add("t", 0, 20, 0)
	assert.Nil(t, e, "an offset added twice is refused")
}

func TestTrackerFirstRecordStartsTheTrack(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 1000)
	assert.Empty(t, tr.due(), "the first record polled is where the group stood: nothing new to commit")
	settleAll(tr, pt, es...)
	assert.Equal(t, map[int32]int64{0: 1001}, dueMap(tr))
}

func TestTrackerRevoked(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0, 1})
	p0, es0 := addAll(t, tr, 0, 0, 1, 2)
	_, _ = addAll(t, tr, 1, 0)
	require.True(t, tr.emit(p0, es0[0]))
	require.True(t, tr.emit(p0, es0[1]))
	trs := tr.revoke("t", []int32{0})
	require.Len(t, trs, 1)
	assert.False(t, tr.emit(p0, es0[2]), "a record of a partition being revoked is not emitted")
	_, idle := tr.idle(p0)
	assert.False(t, idle, "two records of the revoked partition are in flight")
	assert.Zero(t, tr.inFlight(), "the revoked partition's records no longer count as the source's")
	tr.end(p0, es0[0], true)
	assert.Equal(t, map[int32]int64{0: 1}, func() map[int32]int64 {
		out := map[int32]int64{}
		for _, c := range tr.dueOf(trs) {
			out[c.tp.partition] = c.offset
		}
		return out
	}(), "what settled while the revoke waits is committed")
	ch, idle := tr.idle(p0)
	require.False(t, idle)
	tr.end(p0, es0[1], true)
	select {
	case <-ch:
	default:
		t.Fatal("the revoke's wait did not end when the last record settled")
	}
	tr.retire(trs)
	assert.Empty(t, tr.dueOf(trs), "retired: nothing to commit")
	assert.NotContains(t, dueMap(tr), int32(0), "the revoked partition is no longer committed")
	assert.Equal(t, []topicPartition{{"t", 1}}, tr.owned())
}

func TestTrackerSettleAfterRevoke(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 5, 6)
	tr.emit(pt, es[0])
	tr.emit(pt, es[1])
	trs := tr.revoke("t", []int32{0})
	tr.retire(trs) // the revoke's bound passed
	tr.end(pt, es[0], true)
	tr.end(pt, es[1], true)
	assert.Empty(t, tr.dueOf(trs), "a late settle of a revoked partition commits nothing")
	assert.Zero(t, tr.pending(), "nor takes room")
	tr.assign("t", []int32{0})
	assert.Empty(t, tr.due(), "the partition assigned again starts a new track")
	pt2, es2 := addAll(t, tr, 0, 5)
	assert.NotSame(t, pt, pt2)
	settleAll(tr, pt2, es2...)
	assert.Equal(t, map[int32]int64{0: 6}, dueMap(tr))
}

// A partition being revoked is still the source's to settle while the
// revoke waits (what settles then is committed); it is gone once the
// revoke took what it commits, and once retired.
func TestTrackerGoneOnceTheRevokeTookItsCommit(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0, 1})
	p0, es0 := addAll(t, tr, 0, 0, 1)
	p1, _ := addAll(t, tr, 1, 0)
	require.True(t, tr.emit(p0, es0[0]))
	require.True(t, tr.emit(p0, es0[1]))
	assert.False(t, tr.gone(p0), "owned")
	trs := tr.revoke("t", []int32{0})
	assert.False(t, tr.gone(p0), "the revoke waits: a record that settles now is committed by it")
	tr.end(p0, es0[0], true)
	due := tr.dueOf(trs)
	require.Len(t, due, 1)
	assert.Equal(t, int64(1), due[0].offset)
	assert.True(t, tr.gone(p0), "the revoke took its commit: a record settling now commits nothing")
	tr.end(p0, es0[1], true)
	tr.retire(trs)
	assert.True(t, tr.gone(p0), "retired")
	assert.False(t, tr.gone(p1), "the partition kept is the source's")
	tr.retire(tr.revoke("t", []int32{1}))
	assert.True(t, tr.gone(p1), "lost")
}

func TestTrackerLost(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 0, 1)
	settleAll(tr, pt, es[0])
	require.Equal(t, 1, tr.pending())
	tr.retire(tr.revoke("t", []int32{0}))
	assert.Empty(t, tr.due(), "a lost partition commits nothing")
	assert.Zero(t, tr.pending(), "its settled records no longer take room")
	settleAll(tr, pt, es[1])
	assert.Empty(t, tr.due())
}

func TestTrackerHugeOffsets(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	base := int64(math.MaxInt64 - 10)
	pt, es := addAll(t, tr, 0, base, base+1, base+5)
	settleAll(tr, pt, es[1], es[0])
	assert.Equal(t, map[int32]int64{0: base + 2}, dueMap(tr))
	settleAll(tr, pt, es[2])
	assert.Equal(t, map[int32]int64{0: base + 6}, dueMap(tr))
}

func TestTrackerCommitCoversWhatSettledBeforeIt(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	pt, es := addAll(t, tr, 0, 0, 1, 2)
	settleAll(tr, pt, es[0])
	c := tr.due() // taken for a commit
	settleAll(tr, pt, es[1])
	tr.committed(c) // the commit of offset 1 ends
	assert.Equal(t, map[int32]int64{0: 2}, dueMap(tr), "offset 1 settled during the commit: due next")
	assert.Equal(t, 1, tr.pending())
	tr.committed(c) // an old commit's answer again
	assert.Equal(t, 1, tr.pending(), "counted once")
}

func TestTrackerManyPartitionsSorted(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("b", []int32{2, 0})
	tr.assign("a", []int32{1})
	for _, tp := range []topicPartition{{"b", 2}, {"b", 0}, {"a", 1}} {
		pt, e := tr.add(tp.topic, tp.partition, 0, 0)
		settleAll(tr, pt, e)
	}
	var got []topicPartition
	for _, c := range tr.due() {
		got = append(got, c.tp)
	}
	assert.Equal(t, []topicPartition{{"a", 1}, {"b", 0}, {"b", 2}}, got)
}

// With commitStart (StartAtEnd), a track's first record makes its offset
// due at once, and wakes the committer once; without it, nothing is due
// until a record settles.
func TestTrackerCommitStart(t *testing.T) {
	t.Parallel()
	tk := newOffsetTracker()
	starts := 0
	tk.commitStart, tk.onStart = true, func() { starts++ }
	tk.assign("t", []int32{0, 1})
	addAll(t, tk, 0, 40, 41)
	assert.Equal(t, map[int32]int64{0: 40}, dueMap(tk), "the start is due before any record settles")
	assert.Equal(t, 1, starts, "the committer is woken once per track")
	tk.committed(tk.due())
	assert.Empty(t, dueMap(tk), "committed once")

	plain := newOffsetTracker()
	plain.assign("t", []int32{0})
	pt, es := addAll(t, plain, 0, 40, 41)
	assert.Empty(t, dueMap(plain), "nothing due before a record settles")
	settleAll(plain, pt, es[0])
	assert.Equal(t, map[int32]int64{0: 41}, dueMap(plain))
}

// unemit takes an emitted record back to be emitted again: it no longer
// counts as in flight (a revoke does not wait for it), it holds its
// partition's commit until it settles, and a record of a partition being
// revoked, or one already ended, is not taken back.
func TestTrackerUnemit(t *testing.T) {
	t.Parallel()
	tk := newOffsetTracker()
	tk.assign("t", []int32{0})
	pt, es := addAll(t, tk, 0, 0, 1, 2)
	for _, e := range es {
		require.True(t, tk.emit(pt, e))
	}
	require.True(t, tk.unemit(pt, es[0]))
	assert.Equal(t, 2, tk.inFlight())
	tk.end(pt, es[1], true)
	tk.end(pt, es[2], true)
	_, idle := tk.idle(pt)
	assert.True(t, idle, "nothing of the partition in flight")
	assert.Empty(t, dueMap(tk), "the record taken back holds the commit")
	assert.False(t, tk.unemit(pt, es[1]), "an ended record is not taken back")
	require.True(t, tk.emit(pt, es[0]), "emitted again")
	tk.end(pt, es[0], true)
	assert.Equal(t, map[int32]int64{0: 3}, dueMap(tk))

	pt2, es2 := addAll(t, tk, 0, 3)
	require.True(t, tk.emit(pt2, es2[0]))
	tk.revoke("t", []int32{0})
	assert.False(t, tk.unemit(pt2, es2[0]), "a partition being revoked takes nothing back")
}

// addEntries registers a poll's records under one lock taking, as
// addEntry would one by one: a partition not the tracker's, or an offset
// not past those added, gets no track.
func TestTrackerAddEntries(t *testing.T) {
	t.Parallel()
	tk := newOffsetTracker()
	tk.assign("t", []int32{0, 1})
	type in struct {
		p int32
		o int64
	}
	ins := []in{{0, 5}, {0, 6}, {2, 0}, {1, 3}, {0, 4}, {0, 7}}
	es := make([]*trackEntry, len(ins))
	trs := make([]*partitionTrack, len(ins))
	tk.addEntries(len(ins), func(i int) (string, int32, *trackEntry) {
		es[i] = &trackEntry{offset: ins[i].o}
		return "t", ins[i].p, es[i]
	}, func(i int, tr *partitionTrack) { trs[i] = tr })
	for i, want := range []bool{true, true, false, true, false, true} {
		assert.Equal(t, want, trs[i] != nil, "record %d (partition %d offset %d) tracked", i, ins[i].p, ins[i].o)
	}
	assert.Same(t, trs[0], trs[5])
	assert.NotSame(t, trs[0], trs[3])
	for _, i := range []int{0, 1, 3} {
		settleAll(tk, trs[i], es[i])
	}
	assert.Equal(t, map[int32]int64{0: 7, 1: 4}, dueMap(tk), "offset 7 of partition 0 is not settled")
}

// A record emitted while its partition is being revoked either counts
// for the revoke's wait or is not emitted: once the wait ends, none is in
// flight, however the emits and the revoke interleave.
func TestTrackerRevokeRacesEmits(t *testing.T) {
	t.Parallel()
	for range 50 {
		tk := newOffsetTracker()
		tk.assign("t", []int32{0})
		const n = 64
		var es []*trackEntry
		var pt *partitionTrack
		for o := range int64(n) {
			tr, e := tk.add("t", 0, o, 0)
			require.NotNil(t, e)
			pt, es = tr, append(es, e)
		}
		var ends sync.WaitGroup
		var emitted, ended atomic.Int64
		emits := make(chan struct{})
		go func() {
			defer close(emits)
			for _, e := range es {
				if !tk.emit(pt, e) {
					continue
				}
				emitted.Add(1)
				ends.Add(1)
				go func() {
					defer ends.Done()
					ended.Add(1) // counted before the end the revoke waits on
					tk.end(pt, e, true)
				}()
			}
		}()
		trs := tk.revoke("t", []int32{0})
		for {
			ch, idle := tk.idle(pt)
			if idle {
				break
			}
			<-ch
		}
		<-emits
		assert.Equal(t, emitted.Load(), ended.Load(), "every record emitted ended before the revoke's wait did")
		assert.Zero(t, pt.inFlight())
		_ = tk.dueOf(trs)
		tk.retire(trs)
		ends.Wait()
	}
}

// A copy under way when the revoke stops waiting for records in flight is
// waited for: no copy begins once the revoke sealed the track, the wait
// ends when the copies end, and a stored copy's record is settled in the
// same step, so that the revoke's commit takes it.
func TestTrackerRevokeWaitsForCopiesUnderWay(t *testing.T) {
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	p0, es := addAll(t, tr, 0, 0, 1, 2)
	for _, e := range es {
		require.True(t, tr.emit(p0, e))
	}
	require.True(t, tr.beginCopy(p0))
	require.True(t, tr.beginCopy(p0))
	trs := tr.revoke("t", []int32{0})
	assert.False(t, tr.gone(p0), "the revoke waits for the records in flight")
	ch := tr.sealCopies(p0)
	require.NotNil(t, ch, "two copies under way")
	assert.True(t, tr.gone(p0), "sealed")
	assert.False(t, tr.beginCopy(p0), "no copy begins once sealed")
	tr.endCopy(p0, es[0], true)
	select {
	case <-ch:
		t.Fatal("a copy is still under way")
	default:
	}
	tr.endCopy(p0, es[1], false)
	select {
	case <-ch:
	default:
		t.Fatal("no copy is under way")
	}
	assert.Nil(t, tr.sealCopies(p0), "none under way")
	due := tr.dueOf(trs)
	require.Len(t, due, 1)
	assert.Equal(t, int64(1), due[0].offset, "the stored copy's record is committed, the one whose copy failed is not")
	tr.end(p0, es[0], false) // its item failed after all: the copy stands in for it
	tr.retire(trs)
}
