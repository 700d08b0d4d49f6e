package nats

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The ledger of spared deliveries holds at most its limit: past it, the
// message counted least recently is forgotten, and its deliveries all
// count again. A message settled for good is forgotten, and a consumer
// created again starts a new ledger.
func TestLedgerCap(t *testing.T) {
	l := newLedger(3)
	l.begin("s/c@1")
	l.spare(1)
	l.spare(1)
	l.spare(2)
	l.spare(3)
	assert.Equal(t, 2, l.spared(1))
	assert.Equal(t, 3, l.len())

	l.spare(2) // 2 is now the most recently counted, 1 the least
	l.spare(4) // at the cap: 1 goes
	assert.Equal(t, 3, l.len(), "the cap holds")
	assert.Zero(t, l.spared(1), "the oldest entry is evicted: every delivery of its message counts again")
	assert.Equal(t, 2, l.spared(2))
	assert.Equal(t, 1, l.spared(3))
	assert.Equal(t, 1, l.spared(4))
	assert.Equal(t, int64(1), l.evicted)

	l.forget(3)
	assert.Zero(t, l.spared(3), "settled for good")
	assert.Equal(t, 2, l.len())
	l.forget(99) // nothing to forget

	l.begin("s/c@1")
	assert.Equal(t, 2, l.spared(2), "the same consumer keeps its counts")
	l.begin("s/c@2")
	assert.Zero(t, l.len(), "a consumer created again counts afresh")
	l.spare(5)
	assert.Equal(t, 1, l.spared(5))
}
