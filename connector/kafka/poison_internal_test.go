package kafka

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
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
				got <- s.storeInstead(rec, func() error {
					close(inStore)
					<-release
					if !stored {
						return errors.New("refused")
					}
					return nil
				})
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
	assert.False(t, s.storeInstead(rec, func() error { called = true; return nil }))
	assert.False(t, called, "nothing stored for a gone record")
	tr.retire(trs)
}
