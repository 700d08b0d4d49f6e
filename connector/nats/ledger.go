package nats

import (
	"container/list"
	"sync"
)

// maxSpared bounds the messages a source's ledger of spared deliveries
// keeps (see ledger).
const maxSpared = 100_000

// A ledger counts, in process, the deliveries of each message that the
// poison guard spares: those that ended without the message being at
// fault, since the run ended first (its item's outcome was node.Failed)
// or the source gave it back unemitted, and those the connector itself
// redelivered (the broker's retry, a hand-off). The server's NumDelivered counts
// them too, and the guard takes them off it, so that the neighbours held
// when a poison message fails the run are not dead-lettered with it.
//
// It is keyed by stream sequence, for one consumer: begin clears it when
// the source opens a consumer other than the one it counted for (deleted
// and created again, with counts of its own). An entry goes when its
// message is settled for good (acked or terminated). The ledger holds at
// most limit entries: past it, the entry counted least recently goes, and
// its message's deliveries all count again, as they do when the process
// that spared them is gone.
type ledger struct {
	mu      sync.Mutex
	limit   int
	epoch   string
	at      map[uint64]*list.Element // of *spared
	order   list.List                // least recently counted first
	evicted int64
}

type spared struct {
	seq uint64
	n   int
}

func newLedger(limit int) *ledger {
	return &ledger{limit: max(limit, 1), at: map[uint64]*list.Element{}}
}

// begin starts counting for the consumer that epoch names, and forgets
// every count when it is not the one counted for.
func (l *ledger) begin(epoch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch != l.epoch {
		l.epoch = epoch
		clear(l.at)
		l.order.Init()
	}
}

// spare counts one more spared delivery of the message at seq.
func (l *ledger) spare(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.at[seq]; ok {
		e.Value.(*spared).n++
		l.order.MoveToBack(e)
		return
	}
	if len(l.at) >= l.limit {
		oldest := l.order.Front()
		l.order.Remove(oldest)
		delete(l.at, oldest.Value.(*spared).seq)
		l.evicted++
	}
	l.at[seq] = l.order.PushBack(&spared{seq: seq, n: 1})
}

// spared returns the spared deliveries of the message at seq.
func (l *ledger) spared(seq uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.at[seq]; ok {
		return e.Value.(*spared).n
	}
	return 0
}

// forget drops the count of the message at seq: it was settled for good.
func (l *ledger) forget(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.at[seq]; ok {
		l.order.Remove(e)
		delete(l.at, seq)
	}
}

// len returns how many messages the ledger counts for.
func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}
