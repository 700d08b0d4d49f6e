package kafka

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A sentWatch counts the produce requests its client wrote to a broker
// (a byte of one or more), as a kgo hook. What the client says of a
// record it failed without an answer from a broker (timed out or retried
// out before it was produced, cancelled, no leader to send to) holds
// only while no produce request was written since the record was handed
// over: franz-go fails so a batch whose first send was written and
// stored with its answer lost, once a resend was refused as retryable
// (the broker's refusal clears its doubt, not the lost answer's). The
// watch cannot tell which records a request held, so any produce
// written since makes such a failure's outcome unknown: a record is
// called never sent only when nothing at all was sent meanwhile.
type sentWatch struct{ writes atomic.Uint64 }

// OnBrokerWrite counts a produce request of which some bytes were
// written (kgo.HookBrokerWrite).
func (w *sentWatch) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, written int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.Produce) && written > 0 {
		w.writes.Add(1)
	}
}

// mark returns the count to give sentSince, taken before a record is
// handed to the client.
func (w *sentWatch) mark() uint64 { return w.writes.Load() }

// sentSince reports whether a produce request was written since mark m.
func (w *sentWatch) sentSince(m uint64) bool { return w.writes.Load() != m }
