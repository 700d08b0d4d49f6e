package kafka

import (
	"sort"
	"sync"
	"sync/atomic"
)

// An offsetTracker keeps, per partition the source owns, the records it
// polled and has not settled, and so the offset it may commit: the
// lowest one not yet settled (Kafka's committed offset is the next to
// read), or one past the highest polled when every record settled.
// Records of one partition are added in offset order; they settle in any
// order.
//
// A record is emitted and ends without the tracker's lock (a record costs
// one lock taking for its whole poll, rather than three of its own): its
// entry's flags and its track's count of records in flight are atomic,
// and the settled records at the front of a track are popped under the
// lock by whoever next reads what to commit or how much is pending.
//
// A partition leaves the tracker when it is revoked or lost: its track is
// retired, and a record of it that settles later changes nothing that
// will be committed.
type offsetTracker struct {
	mu     sync.Mutex
	tracks map[topicPartition]*partitionTrack
	// uncommitted counts, over the tracks, the records settled below
	// their partition's lowest unsettled one and not yet committed: what
	// the next commit covers.
	uncommitted int
	// commitStart makes a track's first record's offset due for commit at
	// once (StartAtEnd: a group without a commit would otherwise start at
	// the end again and skip the record); onStart, when set, is called
	// (under the lock, so it must not block) when that happens.
	commitStart bool
	onStart     func()
	// leaving are the tracks revoked and not yet retired: a revoke under
	// way waits for their records in flight, then commits them.
	leaving map[*partitionTrack]struct{}
}

// A topicPartition names one partition of a topic.
type topicPartition struct {
	topic     string
	partition int32
}

// A partitionTrack is one partition's records in flight, for one spell of
// ownership: a partition assigned again gets a new track.
type partitionTrack struct {
	tp topicPartition
	// entries are the records added and not yet popped, in offset order;
	// settled ones are popped once every record before them settled.
	entries []*trackEntry
	// next is one past the highest offset added, -1 before the first.
	next int64
	// done is the offset below which every record settled, -1 while none
	// did; epoch is the leader epoch of the record just below it.
	done  int64
	epoch int32
	// committed is the offset last committed for the partition, -1 for
	// none yet.
	committed int64
	// popped counts the entries popped, settled, since the track began;
	// poppedCommitted those of them that a commit covered.
	popped, poppedCommitted int
	// revoking is set once the partition is being revoked or was lost:
	// its records not yet emitted are dropped. retired is set once it is
	// gone: a record that settles later changes nothing. Both are
	// guarded by the tracker's mu; revoking sets trackRevoking in flight
	// too, for emit.
	revoking, retired bool
	// taken is set, guarded by mu, once a revoke took what it commits of
	// the track (dueOf): a record that settles from then on is committed
	// by nobody, so its next owner reads it again.
	taken bool
	// copying counts, guarded by mu, the copies of the track's records
	// under way (a broker retry's, a hand-off's: see beginCopy); copied,
	// guarded by mu, is closed once it falls to zero while a revoke waits
	// for it. sealed, guarded by mu, is set once the revoke no longer
	// waits for the track's records in flight (RevokeTimeout passed): no
	// copy of them begins from then on.
	copying int
	copied  chan struct{}
	sealed  bool
	// flight counts the entries handed to the pipeline and not settled or
	// failed (what a revoke waits for), with trackRevoking once the track
	// is being revoked: emit adds to it only while that is not set, in
	// one atomic step. idle, guarded by mu, is closed once the count
	// falls to zero while a revoke waits for it.
	flight atomic.Int64
	idle   chan struct{}
}

// trackRevoking is the bit of partitionTrack.flight that says the track
// is being revoked; the bits below it count the records in flight.
const trackRevoking = int64(1) << 62

// inFlight returns how many of tr's entries are in flight.
func (tr *partitionTrack) inFlight() int { return int(tr.flight.Load() &^ trackRevoking) }

// A trackEntry is one record of a partition track.
type trackEntry struct {
	offset int64
	epoch  int32
	// flags are the entry's entryEmitted, entrySettled and entryEnded.
	flags atomic.Uint32
}

const (
	// entryEmitted is set while the record is handed to the pipeline.
	entryEmitted uint32 = 1 << iota
	// entrySettled is set once the record settled: its offset may be
	// committed.
	entrySettled
	// entryEnded is set once the record's item reached its outcome,
	// settled or not (Failed leaves it unsettled but no longer in
	// flight).
	entryEnded
)

func newOffsetTracker() *offsetTracker {
	return &offsetTracker{tracks: map[topicPartition]*partitionTrack{}, leaving: map[*partitionTrack]struct{}{}}
}

// assign starts a track for each partition that has none.
func (t *offsetTracker) assign(topic string, partitions []int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range partitions {
		tp := topicPartition{topic, p}
		if _, ok := t.tracks[tp]; !ok {
			t.tracks[tp] = &partitionTrack{tp: tp, next: -1, done: -1, epoch: -1, committed: -1}
		}
	}
}

// add registers a polled record, and returns its track and entry, or nil
// when its partition is not the source's (revoked between the fetch and
// now) or the offset is not past those added before (a record fetched
// again after a rewind the tracker did not see).
func (t *offsetTracker) add(topic string, partition int32, offset int64, epoch int32) (*partitionTrack, *trackEntry) {
	e := &trackEntry{offset: offset, epoch: epoch}
	tr := t.addEntry(topic, partition, e)
	if tr == nil {
		return nil, nil
	}
	return tr, e
}

// addEntry is add for an entry the caller made (the source keeps it in
// its record, one allocation per record polled rather than two); it
// returns nil where add does.
func (t *offsetTracker) addEntry(topic string, partition int32, e *trackEntry) *partitionTrack {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addLocked(t.tracks[topicPartition{topic, partition}], e)
}

// addEntries adds the entries of a poll's records under one lock taking:
// at(i) returns record i's topic, partition and entry, and put(i, tr)
// gets its track, nil where addEntry returns nil.
func (t *offsetTracker) addEntries(n int, at func(i int) (string, int32, *trackEntry), put func(i int, tr *partitionTrack)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last *partitionTrack
	for i := range n {
		topic, partition, e := at(i)
		// A poll's records come a partition at a time.
		tr := last
		if tr == nil || tr.tp.partition != partition || tr.tp.topic != topic {
			tr = t.tracks[topicPartition{topic, partition}]
		}
		put(i, t.addLocked(tr, e))
		last = tr
	}
}

// addLocked is addEntry for tr, the track of e's partition (nil when it
// has none), under mu.
func (t *offsetTracker) addLocked(tr *partitionTrack, e *trackEntry) *partitionTrack {
	offset := e.offset
	if tr == nil || offset < tr.next {
		return nil
	}
	if tr.next < 0 && tr.done < 0 {
		// The first record of the track: everything before it counts as
		// done (it was committed, or skipped by the reset policy). There
		// is nothing new to commit until a record settles, unless the
		// start itself must be committed (commitStart): committing it
		// again where the group had committed it changes nothing.
		tr.done = offset
		tr.committed = offset
		if t.commitStart {
			tr.committed = -1
			if t.onStart != nil {
				t.onStart()
			}
		}
	}
	tr.entries = append(tr.entries, e)
	tr.next = offset + 1
	return tr
}

// revoking reports whether tr's partition is being revoked, or was lost
// or retired.
func (t *offsetTracker) revoking(tr *partitionTrack) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tr.revoking || tr.retired
}

// gone reports whether tr's partition is no longer the source's to
// settle: it was lost or retired, or the revoke that gives it up no longer
// waits for its records in flight (sealCopies) or took what it commits. A
// record of it that settles now may not be committed; its next owner reads
// it again. (While a revoke still waits for the partition's records in
// flight, a record that settles is committed by the revoke.)
func (t *offsetTracker) gone(tr *partitionTrack) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tr.retired || tr.taken || tr.sealed
}

// beginCopy registers a copy of a record of tr as under way, and reports
// false, registering nothing, when tr is gone: one step under mu, so that
// a revoke either waits for the copy (sealCopies) or the copy does not
// begin. endCopy must follow a true.
func (t *offsetTracker) beginCopy(tr *partitionTrack) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.retired || tr.taken || tr.sealed {
		return false
	}
	tr.copying++
	return true
}

// endCopy ends a copy of e, a record of tr, that beginCopy registered.
// When the copy was stored, e settles at once (its copy stands in for it,
// whatever its item's outcome), in the same step, so that a revoke that
// waited for the copy commits past it.
func (t *offsetTracker) endCopy(tr *partitionTrack, e *trackEntry, stored bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if stored {
		e.flags.Or(entrySettled)
	}
	tr.copying--
	if tr.copying == 0 && tr.copied != nil {
		close(tr.copied)
		tr.copied = nil
	}
}

// sealCopies lets no copy of tr's records begin from now on (tr is gone),
// and returns a channel closed once none is under way; nil when none is.
func (t *offsetTracker) sealCopies(tr *partitionTrack) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr.sealed = true
	if tr.copying == 0 {
		return nil
	}
	if tr.copied == nil {
		tr.copied = make(chan struct{})
	}
	return tr.copied
}

// emit marks e as handed to the pipeline, and reports false when its
// partition is being revoked or was retired meanwhile: the record is
// dropped, not emitted. It takes no lock: a revoke sets trackRevoking
// before it waits for the count, so a record is either counted before
// the revoke looks or not emitted.
//
// emit must not run at once with the end of the same record, nor after
// it: a record not yet emitted is ended (given back, settled unemitted)
// only on the Run goroutine that would emit it, and the tier gate's
// dropHeld gives back only records that goroutine is not emitting. An
// end before the emit would leave the partition's count at one for ever,
// and a revoke or drain would wait out its bound.
func (t *offsetTracker) emit(tr *partitionTrack, e *trackEntry) bool {
	for {
		f := tr.flight.Load()
		if f&trackRevoking != 0 {
			return false
		}
		if tr.flight.CompareAndSwap(f, f+1) {
			break
		}
	}
	e.flags.Or(entryEmitted)
	return true
}

// landed counts one of tr's records in flight ended, and wakes a revoke
// waiting for the last.
func (t *offsetTracker) landed(tr *partitionTrack) {
	if f := tr.flight.Add(-1); f == trackRevoking {
		t.mu.Lock()
		t.wake(tr)
		t.mu.Unlock()
	}
}

// wake closes tr's idle channel once none of its records is in flight;
// mu is held.
func (t *offsetTracker) wake(tr *partitionTrack) {
	if tr.idle != nil && tr.inFlight() == 0 {
		close(tr.idle)
		tr.idle = nil
	}
}

// unemit takes e, emitted, back to be emitted again, and reports false
// when its partition is being revoked or is gone: then it is not to be
// emitted again.
func (t *offsetTracker) unemit(tr *partitionTrack, e *trackEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := e.flags.Load()
	if tr.revoking || tr.retired || f&entryEnded != 0 || f&entryEmitted == 0 ||
		!e.flags.CompareAndSwap(f, f&^entryEmitted) {
		return false
	}
	tr.flight.Add(-1)
	t.wake(tr)
	return true
}

// end records the outcome of e: settled says whether its offset may be
// committed. A record of a retired track changes nothing but the count
// that a revoke waits on. It takes no lock but to wake a revoke: the
// entry is popped by the next advance (see advanceAll).
func (t *offsetTracker) end(tr *partitionTrack, e *trackEntry, settled bool) {
	var f uint32
	for {
		f = e.flags.Load()
		if f&entryEnded != 0 {
			return
		}
		next := f | entryEnded
		if settled {
			next |= entrySettled
		}
		if e.flags.CompareAndSwap(f, next) {
			break
		}
	}
	if f&entryEmitted != 0 {
		t.landed(tr)
	}
}

// advanceAll pops the settled entries at the front of every track the
// tracker holds, and counts them as uncommitted; mu is held. Whatever
// reads the offsets to commit or the count pending calls it first.
func (t *offsetTracker) advanceAll() {
	for _, tr := range t.tracks {
		t.advanceTrack(tr)
	}
}

// advanceTrack is advanceAll for tr, which may be revoked: a retired
// track changes nothing.
func (t *offsetTracker) advanceTrack(tr *partitionTrack) {
	if !tr.retired {
		t.uncommitted += tr.advance()
	}
}

// advance pops the settled entries at the front of tr, and returns how
// many.
func (tr *partitionTrack) advance() int {
	i := 0
	for i < len(tr.entries) && tr.entries[i].flags.Load()&entrySettled != 0 {
		tr.done = tr.entries[i].offset + 1
		tr.epoch = tr.entries[i].epoch
		i++
	}
	if i > 0 {
		clear(tr.entries[:i])
		tr.entries = tr.entries[i:]
		tr.popped += i
	}
	return i
}

// A commitOffset is what to commit for one partition.
type commitOffset struct {
	tp     topicPartition
	offset int64
	epoch  int32
	track  *partitionTrack
	popped int // the track's popped entries when the offset was taken
}

// due returns, for every partition the source owns, the offset to commit
// when it moved past the one last committed.
func (t *offsetTracker) due() []commitOffset {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceAll()
	var out []commitOffset
	for _, tr := range t.tracks {
		if c, ok := tr.due(); ok {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].tp.topic != out[j].tp.topic {
			return out[i].tp.topic < out[j].tp.topic
		}
		return out[i].tp.partition < out[j].tp.partition
	})
	return out
}

// due returns tr's offset to commit, and whether it moved.
func (tr *partitionTrack) due() (commitOffset, bool) {
	if tr.done < 0 || tr.done <= tr.committed {
		return commitOffset{}, false
	}
	return commitOffset{tp: tr.tp, offset: tr.done, epoch: tr.epoch, track: tr, popped: tr.popped}, true
}

// committed records that c was committed.
func (t *offsetTracker) committed(cs []commitOffset) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		tr := c.track
		tr.committed = max(tr.committed, c.offset)
		if c.popped > tr.poppedCommitted {
			if !tr.retired {
				t.uncommitted -= c.popped - tr.poppedCommitted
			}
			tr.poppedCommitted = c.popped
		}
	}
}

// pending returns the records settled and not yet committed that the
// next commit covers.
func (t *offsetTracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceAll()
	return t.uncommitted
}

// revoke takes the partitions out of the tracker and returns their
// tracks. Their records not yet emitted are not emitted: they belong to
// the partitions' next owner. The tracks are retired only by retire, so
// that a revoke can still commit what settles while it waits.
func (t *offsetTracker) revoke(topic string, partitions []int32) []*partitionTrack {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*partitionTrack
	for _, p := range partitions {
		tp := topicPartition{topic, p}
		if tr, ok := t.tracks[tp]; ok {
			delete(t.tracks, tp)
			// What settled so far counts, as it would have had each
			// record popped as it settled.
			t.advanceTrack(tr)
			tr.revoking = true
			tr.flight.Or(trackRevoking)
			t.leaving[tr] = struct{}{}
			out = append(out, tr)
		}
	}
	return out
}

// idle returns a channel closed once no record of tr is in flight in
// the pipeline, and whether it is already so.
func (t *offsetTracker) idle(tr *partitionTrack) (<-chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.inFlight() == 0 {
		return nil, true
	}
	if tr.idle == nil {
		tr.idle = make(chan struct{})
	}
	return tr.idle, false
}

// inFlight returns the records emitted and not yet ended, across the
// partitions the source owns.
func (t *offsetTracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, tr := range t.tracks {
		n += tr.inFlight()
	}
	return n
}

// dueOf returns what to commit for the tracks of a revoke.
func (t *offsetTracker) dueOf(trs []*partitionTrack) []commitOffset {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []commitOffset
	for _, tr := range trs {
		t.advanceTrack(tr)
		tr.taken = true
		if c, ok := tr.due(); ok && !tr.retired {
			out = append(out, c)
		}
	}
	return out
}

// retire marks the tracks gone: a record of them that settles later
// changes nothing that will be committed.
func (t *offsetTracker) retire(trs []*partitionTrack) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range trs {
		if !tr.retired {
			t.uncommitted -= tr.popped - tr.poppedCommitted
		}
		tr.revoking, tr.retired = true, true
		tr.flight.Or(trackRevoking)
		delete(t.leaving, tr)
	}
}

// settledUncommitted returns the partitions of trs, retired or not, with
// records settled (in the run from the track's front, what a commit can
// take) that no commit covered, and, apart, those whose start offset
// (StartAtEnd's, see addLocked) is still to be committed. A retired
// track's records that settled after it retired count too: they were
// handled and not committed, so the partition's next owner reads them
// again.
func (t *offsetTracker) settledUncommitted(trs []*partitionTrack) (settled, starts []topicPartition) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range trs {
		if tr.retired {
			tr.advance() // counted nowhere once retired
		} else {
			t.advanceTrack(tr)
		}
		switch {
		case tr.popped > tr.poppedCommitted:
			settled = append(settled, tr.tp)
		case tr.committed < 0 && tr.done >= 0:
			starts = append(starts, tr.tp)
		}
	}
	sortPartitions(settled)
	sortPartitions(starts)
	return settled, starts
}

// sortPartitions sorts tps by topic, then partition.
func sortPartitions(tps []topicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].topic != tps[j].topic {
			return tps[i].topic < tps[j].topic
		}
		return tps[i].partition < tps[j].partition
	})
}

// held returns the tracks of the partitions the tracker holds, and of
// those a revoke under way has yet to commit and retire.
func (t *offsetTracker) held() []*partitionTrack {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*partitionTrack, 0, len(t.tracks)+len(t.leaving))
	for _, tr := range t.tracks {
		out = append(out, tr)
	}
	for tr := range t.leaving {
		out = append(out, tr)
	}
	return out
}

// owned returns the partitions the tracker holds a track for, sorted.
func (t *offsetTracker) owned() []topicPartition {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]topicPartition, 0, len(t.tracks))
	for tp := range t.tracks {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}
