package kafka

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The read counts answer from their lock-free count while no record
// failed, and from the map once one did, until it settled.
func TestReadCountsCountFailedReadsUntilSettled(t *testing.T) {
	r := readCounts{counts: map[topicPartitionOffset]int{}}
	k1 := topicPartitionOffset{topicPartition{"t", 0}, 5}
	k2 := topicPartitionOffset{topicPartition{"t", 1}, 5}
	assert.Equal(t, 0, r.before(k1))
	r.settled(k1) // nothing failed: nothing to forget
	r.failed(k1)
	r.failed(k1)
	r.failed(k2)
	assert.Equal(t, 2, r.before(k1))
	assert.Equal(t, 1, r.before(k2))
	assert.EqualValues(t, 2, r.n.Load())
	r.settled(k1)
	assert.Equal(t, 0, r.before(k1))
	assert.Equal(t, 1, r.before(k2), "settling one record leaves another's count")
	r.settled(k2)
	assert.Zero(t, r.n.Load())
	assert.Equal(t, 0, r.before(k2))
}

// Past maxReadCounts the counts start afresh, and the lock-free count
// follows.
func TestReadCountsStartAfreshAtTheBound(t *testing.T) {
	r := readCounts{counts: map[topicPartitionOffset]int{}}
	for o := range int64(maxReadCounts) {
		r.failed(topicPartitionOffset{topicPartition{"t", 0}, o})
	}
	assert.EqualValues(t, maxReadCounts, r.n.Load())
	last := topicPartitionOffset{topicPartition{"t", 1}, 0}
	r.failed(last)
	assert.EqualValues(t, 1, r.n.Load())
	assert.Equal(t, 1, r.before(last))
	assert.Equal(t, 0, r.before(topicPartitionOffset{topicPartition{"t", 0}, 0}))
}

// addEntry tracks the entry the caller made, and refuses one of a
// partition not the tracker's or at an offset already added.
func TestAddEntryTracksTheCallersEntry(t *testing.T) {
	tk := newOffsetTracker()
	tk.assign("t", []int32{0})
	e := &trackEntry{offset: 10, epoch: 3}
	tr := tk.addEntry("t", 0, e)
	require.NotNil(t, tr)
	require.Len(t, tr.entries, 1)
	assert.Same(t, e, tr.entries[0])
	assert.Nil(t, tk.addEntry("t", 0, &trackEntry{offset: 10}), "an offset already added")
	assert.Nil(t, tk.addEntry("t", 1, &trackEntry{offset: 0}), "a partition not assigned")
	require.True(t, tk.emit(tr, e))
	tk.end(tr, e, true)
	assert.Equal(t, map[int32]int64{0: 11}, dueMap(tk))
}

// A record without the copy headers keeps nothing carried and no story,
// and names itself; a copy this source's consumer made carries its
// original's name, deliveries and story.
func TestKnowKeepsWhatOnlyCopiesCarry(t *testing.T) {
	s, err := NewSource(SourceConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "orders", Group: "g"})
	require.NoError(t, err)
	sess := &session{src: s, tracker: newOffsetTracker()}
	sess.tracker.assign("orders", []int32{0})

	plain := sess.track(&kgo.Record{Topic: "orders", Partition: 0, Offset: 4, Headers: []kgo.RecordHeader{{Key: "k", Value: []byte("v")}}})
	require.NotNil(t, plain)
	s.know(plain)
	assert.Nil(t, plain.g.carried)
	assert.Nil(t, plain.g.past)
	assert.Zero(t, plain.g.pastStory().failures)
	assert.False(t, plain.g.copied().ok)
	assert.Equal(t, topicPartitionOffset{topicPartition{"orders", 0}, 4}, plain.g.first)
	m := plain.emitted()
	assert.Equal(t, 1, m.Deliveries)
	assert.Equal(t, int64(4), m.Offset)

	cp := sess.track(&kgo.Record{Topic: "orders", Partition: 0, Offset: 9, Headers: []kgo.RecordHeader{
		{Key: HeaderConsumer, Value: []byte("orders/g")},
		{Key: HeaderTopic, Value: []byte("orders")},
		{Key: HeaderPartition, Value: []byte("2")},
		{Key: HeaderOffset, Value: []byte("7")},
		{Key: HeaderDeliveries, Value: []byte("3")},
		{Key: HeaderFailures, Value: []byte("2")},
	}})
	require.NotNil(t, cp)
	s.know(cp)
	require.NotNil(t, cp.g.carried)
	assert.Equal(t, 2, cp.g.pastStory().failures, "the copy's story")
	assert.Equal(t, topicPartitionOffset{topicPartition{"orders", 2}, 7}, cp.g.first)
	m = cp.emitted()
	assert.Equal(t, 4, m.Deliveries)
	assert.Equal(t, int32(2), m.Partition)
	assert.Equal(t, int64(7), m.Offset)

	other := &kgo.Record{Headers: []kgo.RecordHeader{{Key: HeaderConsumer, Value: []byte("orders/h")}}}
	assert.True(t, s.othersCopy(&record{kr: other}), "another group's copy")
	assert.False(t, s.othersCopy(cp), "this group's copy")
	assert.False(t, s.othersCopy(plain), "no copy")
	assert.Zero(t, notCopied, "nothing wrote the shared zero carried")
	assert.Zero(t, noStory, "nothing wrote the shared zero story")
}
