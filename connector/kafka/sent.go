package kafka

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A sentWatch counts, as kgo hooks, the produce requests its client
// wrote to a broker (a byte of one or more), and the answers that may
// have been lost: a produce whose write or read failed, and any broken
// connection (a garbled answer breaks its connection with no read error).
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
// batch (too large, invalid, corrupt, a bad timestamp, no such topic)
// answers one send of it, so it is taken as "not stored" only when no
// answer was lost meanwhile (a lost one may have been a stored first
// send). A lost answer anywhere on the client counts, which can call a
// refusal unknown that was not (safe: unknown is retried by the engine).
// Left uncounted, so a refusal after them is taken as the answer though
// an earlier send may be stored: an answer read whole that then fails to
// parse (it breaks no connection), and a broker's answer that leaves the
// send in doubt (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a
// partition left out of the answer), which no hook shows. Taking every
// refusal after more than one write as unknown instead would close that
// gap, but would never give a record refused for its own content its
// verdict under concurrent Writes (each retry refused again, unknown
// again).
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

// OnBrokerDisconnect counts a broken connection as a possible lost
// answer (kgo.HookBrokerDisconnect).
func (w *sentWatch) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { w.lost.Add(1) }

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
// but a broker's refusal of the batch (refusal), asked about separately
// (see sentWatch), and the client's abort of a transaction, which
// discards it.
func mayBeStored(err error) bool {
	return !refusal(err) && !errors.Is(err, kgo.ErrAborting)
}

// refusal reports whether err is a broker's refusal of the record's
// batch for its content or topic: too large, invalid, corrupt, a bad
// timestamp, no such topic. It answers one send of the batch.
func refusal(err error) bool {
	if timedOut(err) {
		return false
	}
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.CorruptMessage) || errors.Is(err, kerr.InvalidTimestamp)
}

// timedOut reports whether err is the client's delivery timeout or retry
// limit, or a context's end, which it may wrap with the broker's error
// code it last saw: not an answer.
func timedOut(err error) bool {
	return errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
