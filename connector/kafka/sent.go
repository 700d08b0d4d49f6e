package kafka

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A sentWatch counts, as kgo hooks, the produce requests its client
// wrote to a broker (a byte of one or more), and those of them whose
// answer was lost (the write or the read of the answer failed).
//
// What the client says of a record it failed holds only as far as the
// watch allows. franz-go fails a batch whose first send was written and
// stored with its answer lost, once a resend was answered with a
// retryable refusal (the answer clears its doubt, not the lost one's):
// with its delivery timeout or retry limit, a load error (no leader, no
// producer ID, even one a metadata answer carries), a batch-mate's
// cancel. The watch cannot tell which records a request held, so any
// produce written since the record was handed over makes such a
// failure's outcome unknown: a record is called never sent only when
// nothing at all was sent meanwhile. A broker's refusal of the record's
// batch as too large is taken as "not stored" only when no produce
// answer was lost meanwhile (a lost answer may have been the stored
// first send of that batch).
type sentWatch struct {
	writes atomic.Uint64
	lost   atomic.Uint64
}

// A sentMark is what a sentWatch had counted when a record was handed
// to the client.
type sentMark struct{ writes, lost uint64 }

// OnBrokerWrite counts a produce request of which some bytes were
// written (kgo.HookBrokerWrite).
func (w *sentWatch) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, written int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.Produce) && written > 0 {
		w.writes.Add(1)
	}
}

// OnBrokerE2E counts a produce request written whose answer will not be
// read: its write or its read failed, or its connection died first
// (kgo.HookBrokerE2E).
func (w *sentWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key == int16(kmsg.Produce) && e.BytesWritten > 0 && (e.WriteErr != nil || e.ReadErr != nil) {
		w.lost.Add(1)
	}
}

// mark returns the counts to give sentSince and lostSince, taken before
// a record is handed to the client.
func (w *sentWatch) mark() sentMark { return sentMark{w.writes.Load(), w.lost.Load()} }

// sentSince reports whether a produce request was written since m.
func (w *sentWatch) sentSince(m sentMark) bool { return w.writes.Load() != m.writes }

// lostSince reports whether the answer of a produce request was lost
// since m.
func (w *sentWatch) lostSince(m sentMark) bool { return w.lost.Load() != m.lost }

// mayBeStored reports whether err, the client's failure of a record, can
// come after a send of the record's batch was stored, when a produce
// request was written since the record was handed over: every failure
// but the broker's refusals of the record's own content or topic (too
// large, invalid, corrupt, a bad timestamp, no such topic), which say
// the batch could not be stored, and the client's abort of a
// transaction, which discards it. A refusal as too large is answered
// separately (see sentWatch).
func mayBeStored(err error) bool {
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// Before the broker's error code the client may wrap as the
		// last one it saw.
		return true
	case errors.Is(err, kgo.ErrAborting),
		errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.CorruptMessage), errors.Is(err, kerr.InvalidTimestamp):
		return false
	}
	return true
}
