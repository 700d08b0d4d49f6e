package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/deadletter"
)

// polledRecord returns a record of partition 0 at offset 0, polled and
// emitted in a session of its own on tracker tr.
func polledRecord(t *testing.T, s *Source, tr *offsetTracker) *record {
	t.Helper()
	sess := &session{ctx: t.Context(), src: s, tracker: tr}
	recs := sess.trackPoll([]*kgo.Record{{Topic: "t", Partition: 0, Offset: 0}})
	require.Len(t, recs, 1)
	require.True(t, tr.emit(recs[0].track, &recs[0].slot))
	return recs[0]
}

// What the poison guard stores in a record's stead (the copy that counts
// its failed run, or its dead letter) is a copy under way to a revoke of
// its partition, as a tier's copy is: the revoke waits for it and, once
// it is stored, commits past the record. Before, the guard's copy was not
// registered: past RevokeTimeout the revoke let the partition go without
// the record, its next reader read it, and the copy was stored too (a
// review reproduced it with two members on kfake).
func TestStoreInsteadHoldsTheRevoke(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(map[bool]string{true: "stored", false: "not stored"}[stored], func(t *testing.T) {
			s := &Source{}
			tr := newOffsetTracker()
			tr.assign("t", []int32{0})
			rec := polledRecord(t, s, tr)

			inStore, release := make(chan struct{}), make(chan struct{})
			got := make(chan bool, 1)
			go func() {
				ok, _ := s.storeInstead(t.Context(), rec, func(context.Context) error {
					close(inStore)
					<-release
					if !stored {
						return errors.New("refused")
					}
					return nil
				})
				got <- ok
			}()
			<-inStore
			trs := tr.revoke("t", []int32{0})
			copied := tr.sealCopies(rec.track)
			require.NotNil(t, copied, "the revoke knows of the store under way")
			select {
			case <-copied:
				t.Fatal("the store is under way")
			default:
			}
			close(release)
			assert.Equal(t, stored, <-got)
			<-copied
			due := tr.dueOf(trs)
			if stored {
				require.Len(t, due, 1)
				assert.Equal(t, int64(1), due[0].offset, "the revoke commits past the record its copy stands in for")
			} else {
				assert.Empty(t, due, "nothing stands in for the record: its next reader reads it")
			}
			tr.retire(trs)
		})
	}
}

// A record gone before the guard stores anything is not stored: its next
// reader reads it, and a copy would be one more delivery.
func TestStoreInsteadStoresNothingForAGoneRecord(t *testing.T) {
	s := &Source{}
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	rec := polledRecord(t, s, tr)
	trs := tr.revoke("t", []int32{0})
	assert.Nil(t, tr.sealCopies(rec.track))
	called := false
	ok, err := s.storeInstead(t.Context(), rec, func(context.Context) error { called = true; return nil })
	assert.False(t, ok)
	assert.NoError(t, err)
	assert.False(t, called, "nothing stored for a gone record")
	tr.retire(trs)
}

// blockingSink blocks each write until release, or until the write's ctx
// ends; it tells each write's ctx on in, and each letter written on wrote.
type blockingSink struct {
	in      chan context.Context
	release chan struct{}
	wrote   chan deadletter.Envelope
}

func newBlockingSink() blockingSink {
	return blockingSink{in: make(chan context.Context, 1), release: make(chan struct{}), wrote: make(chan deadletter.Envelope, 1)}
}

func (b blockingSink) Write(ctx context.Context, env deadletter.Envelope) error {
	b.in <- ctx
	select {
	case <-b.release:
		b.wrote <- env
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arrivedRecord returns a record of partition 0 at offset 0, polled and
// not emitted, in a session of its own on tracker tr.
func arrivedRecord(t *testing.T, s *Source, tr *offsetTracker) *record {
	t.Helper()
	sess := &session{ctx: t.Context(), src: s, tracker: tr}
	recs := sess.trackPoll([]*kgo.Record{{Topic: "t", Partition: 0, Offset: 0}})
	require.Len(t, recs, 1)
	return recs[0]
}

// The dead letters the source writes in a record's stead when it arrives
// (the poison guard's, for a record that already failed MaxDeliveries
// runs; the crash ledger's, for a culprit) are copies under way to a
// revoke, as the guard's copies are: the revoke waits for them, commits
// past the record once written, and each write is bounded by copyTimeout,
// the most the revoke waits. Before, neither letter was registered (the
// revoke let the partition go without the record, its next owner read it,
// and the letter was written too), and neither was bounded. (Found by a
// review.)
func TestLettersOnArrivalHoldTheRevoke(t *testing.T) {
	for _, kind := range []string{"poison", "crash"} {
		t.Run(kind, func(t *testing.T) {
			s := &Source{}
			s.cfg.Clock = clockwork.NewFakeClock()
			s.cfg.MaxDeliveries, s.cfg.CrashLedger = 2, "ledger"
			sink := newBlockingSink()
			s.UseDeadLetter(sink, deadletter.Envelope{})
			tr := newOffsetTracker()
			tr.assign("t", []int32{0})
			rec := arrivedRecord(t, s, tr)
			rec.g.past = &story{failures: 2}

			errc := make(chan error, 1)
			go func() {
				if kind == "crash" {
					errc <- s.crashed(t.Context(), rec)
					return
				}
				handled, err := s.poisonOnArrival(t.Context(), rec)
				assert.True(t, handled)
				errc <- err
			}()
			ctx := <-sink.in
			dl, bounded := ctx.Deadline()
			assert.True(t, bounded && time.Until(dl) <= copyTimeout, "the letter's write is bounded by copyTimeout")
			trs := tr.revoke("t", []int32{0})
			copied := tr.sealCopies(rec.track)
			require.NotNil(t, copied, "the revoke knows of the letter under way")
			close(sink.release)
			require.NoError(t, <-errc)
			<-sink.wrote
			<-copied
			due := tr.dueOf(trs)
			require.Len(t, due, 1)
			assert.Equal(t, int64(1), due[0].offset, "the revoke commits past the record its letter stands in for")
			tr.retire(trs)
		})
	}
}

// A record gone (its partition revoked) before its letter on arrival gets
// none, and the Run goes on: its next owner reads it.
func TestLettersOnArrivalForAGoneRecord(t *testing.T) {
	for _, kind := range []string{"poison", "crash"} {
		t.Run(kind, func(t *testing.T) {
			s := &Source{}
			s.cfg.Clock = clockwork.NewFakeClock()
			s.cfg.MaxDeliveries, s.cfg.CrashLedger = 2, "ledger"
			sink := newBlockingSink()
			close(sink.release)
			s.UseDeadLetter(sink, deadletter.Envelope{})
			tr := newOffsetTracker()
			tr.assign("t", []int32{0})
			rec := arrivedRecord(t, s, tr)
			rec.g.past = &story{failures: 2}
			trs := tr.revoke("t", []int32{0})
			assert.Nil(t, tr.sealCopies(rec.track))
			var err error
			if kind == "crash" {
				err = s.crashed(t.Context(), rec)
			} else {
				_, err = s.poisonOnArrival(t.Context(), rec)
			}
			assert.NoError(t, err)
			tr.retire(trs)
			select {
			case <-sink.wrote:
				t.Fatal("a letter was written for a record already gone: its next owner reads it again too")
			default:
			}
		})
	}
}

// A store that the source's own DeadLetter sink took and wrote nowhere
// (its record went while it wrote, and retrySink marked it unwritten)
// stands in for nothing: the record is not settled, and a revoke commits
// nothing past it.
func TestStoreInsteadWrittenNowhereIsNotStored(t *testing.T) {
	s := &Source{}
	tr := newOffsetTracker()
	tr.assign("t", []int32{0})
	rec := polledRecord(t, s, tr)
	ok, err := s.storeInstead(t.Context(), rec, func(context.Context) error {
		rec.unwritten.Store(true) // as retrySink marks a gone record it skipped
		return nil
	})
	assert.False(t, ok)
	assert.NoError(t, err)
	trs := tr.revoke("t", []int32{0})
	assert.Nil(t, tr.sealCopies(rec.track))
	assert.Empty(t, tr.dueOf(trs), "nothing stands in for the record: no commit past it")
	tr.retire(trs)
}
