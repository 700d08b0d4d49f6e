package pipeline

import (
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/node"
)

// The ledger commits the position of the last item that settled with
// every item before it; a failed item holds it for good, and the ledger
// keeps no item after it.
func TestLedgerCommitsInOrder(t *testing.T) {
	l := &ledger{src: "src"}
	ts := make([]*tracker, 6)
	for i := range ts {
		ts[i] = &tracker{extra: &extra{pos: []byte{byte('1' + i)}, positioned: true}, led: l}
		l.add(ts[i], false)
	}
	pos, seq, _ := l.committed()
	assert.Nil(t, pos)
	assert.Equal(t, uint64(0), seq)

	l.settle(ts[1], node.Delivered)
	pos, _, _ = l.committed()
	assert.Nil(t, pos, "item 0 is not settled")

	l.settle(ts[0], node.Filtered)
	pos, seq, _ = l.committed()
	assert.Equal(t, "2", string(pos))
	assert.Equal(t, uint64(2), seq)

	l.settle(ts[3], node.Failed)
	l.settle(ts[4], node.DeadLettered)
	l.settle(ts[5], node.Skipped)
	l.settle(ts[2], node.HandedOff)
	pos, _, _ = l.committed()
	assert.Equal(t, "3", string(pos), "item 3 failed: nothing after it commits")
	assert.Len(t, l.q, 1)

	late := &tracker{extra: &extra{pos: []byte("9"), positioned: true}, led: l}
	l.add(late, false)
	l.settle(late, node.Delivered)
	pos, _, _ = l.committed()
	assert.Equal(t, "3", string(pos))
	assert.Len(t, l.q, 1)
}

// A rejected item holds the position as a failed one does.
func TestLedgerRejectedHolds(t *testing.T) {
	l := &ledger{src: "src"}
	a := &tracker{extra: &extra{pos: []byte("a"), positioned: true}, led: l}
	b := &tracker{extra: &extra{pos: []byte("b"), positioned: true}, led: l}
	l.add(a, false)
	l.add(b, false)
	l.settle(a, node.Rejected)
	l.settle(b, node.Delivered)
	pos, seq, _ := l.committed()
	assert.Nil(t, pos)
	assert.Equal(t, uint64(0), seq)
}
