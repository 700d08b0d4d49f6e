package rabbitmq

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// ErrCrashed is matched by the error in the dead-letter envelope of a
// message that the source stopped delivering because its crash ledger
// found that it ends the consumer's process (see SourceConfig.CrashLedger).
// That error matches [ErrPoison] too.
var ErrCrashed = errors.New("rabbitmq: the message crashed the consumer")

// crashError returns the error of a message that crashed the consumer,
// with text as its message.
func crashError(text string) error {
	return &broker.CrashError{Text: text, Crashed: ErrCrashed, Poison: ErrPoison}
}

// openCrashLedger opens the source's crash ledger, when it has one and it
// is not open yet.
func (s *Source) openCrashLedger() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.CrashLedger == "" || s.crash != nil {
		return nil
	}
	if s.letters.Sink() == nil {
		return resilience.MarkPermanent(&ConfigError{Field: "CrashLedger", Value: s.cfg.CrashLedger,
			Reason: "a message that crashes the consumer goes to " + broker.NoDeadLetterSink})
	}
	l, err := crashledger.Open(s.cfg.CrashLedger, crashledger.Options{Clock: s.cfg.Clock, AloneWait: s.cfg.CrashAloneWait})
	if err != nil {
		return resilience.MarkPermanent(fmt.Errorf("rabbitmq: source of queue %q: CrashLedger: %w", s.cfg.Queue, err))
	}
	s.crash = l
	return nil
}

// closeCrashLedger closes the crash ledger: what is in flight goes back to
// the queue with the connection, and is not suspect.
func (s *Source) closeCrashLedger() error {
	s.mu.Lock()
	l := s.crash
	s.crash = nil
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Close()
}

// crashTurn is the crash ledger's part in emitting d: it reports handled
// when d must not be emitted, with the error that ends Run (nil when d was
// a culprit, dead-lettered and acked). A suspect waits here until it can
// run alone, and every other message while a suspect does; each wait
// lasts at most CrashAloneWait (see crashledger.Entry.Turn).
func (s *Source) crashTurn(ctx context.Context, d *delivery, msg Message) (handled bool, err error) {
	if s.cfg.CrashLedger == "" {
		return false, nil
	}
	s.mu.Lock()
	l := s.crash
	s.mu.Unlock()
	if l == nil {
		return false, nil
	}
	e := l.Entry(crashID(d.orig))
	if e.Verdict() == crashledger.Culprit {
		return true, s.crashed(ctx, d, e, msg)
	}
	if err := e.Turn(ctx); err != nil {
		// Not emitted: the message goes back to the queue when the
		// session closes.
		return true, err
	}
	d.crash = e
	return false, nil
}

// endCrash tells the crash ledger how d ended: for good, or back in the
// queue without an outcome (a suspect then stays one).
func (d *delivery) endCrash(o node.Outcome) {
	if d.crash == nil {
		return
	}
	if o == node.Failed {
		d.crash.Release()
		return
	}
	d.crash.Settle()
}

// crashed writes the message of d, which the crash ledger names the
// culprit of a crash, to the pipeline's dead-letter sink and acks it. An
// error of the sink ends Run: the message is not acked and goes back to
// the queue, still the culprit.
func (s *Source) crashed(ctx context.Context, d *delivery, e *crashledger.Entry, msg Message) error {
	now := s.cfg.Clock.Now()
	why := crashError(fmt.Sprintf("rabbitmq: poison message: message %s of queue %q crashed the consumer: "+
		"its process ended while the message ran alone, after an earlier crash with it in flight (crash ledger %s)",
		describeMsg(msg), s.cfg.Queue, s.cfg.CrashLedger))
	sink, env := s.letters.Letter(msg, messageType, why, d.id, now)
	env.FirstFailure = now
	env = d.past.merge(env)
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("rabbitmq: dead-letter message %s, which crashed the consumer: %w", d.id, err)
	}
	s.poisoned.Add(1)
	e.Settle()
	d.sess.track()
	d.sess.settle(settle{tag: d.tag, how: ack})
	return nil
}

// crashID names a message in the crash ledger: by its message id when it
// has one, else by a hash of its body, its properties and its headers.
// Every copy the source puts back in the queue (to count its deliveries,
// or through the retry topology) has the same id: the headers of the
// message's life (x-death, x-first-death-*, x-last-death-*,
// x-delivery-count, the x-sluice-* story) and the
// Expiration, which copies change, are left out. Two messages published
// alike without a message id share an id: a suspect's twin runs alone too,
// and a culprit's twin, which would crash the consumer alike, is
// dead-lettered with it.
func crashID(d amqp.Delivery) string {
	if d.MessageId != "" {
		return "id:" + d.MessageId
	}
	h := sha256.New()
	for _, s := range []string{d.ContentType, d.ContentEncoding, d.CorrelationId, d.ReplyTo, d.Type, d.AppId, d.UserId} {
		hashString(h, s)
	}
	hashInt(h, int64(d.Priority))
	hashInt(h, d.Timestamp.Unix())
	hashString(h, string(d.Body))
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		if !lifeHeader(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		hashString(h, k)
		hashValue(h, d.Headers[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// lifeHeader reports whether a header tells a message's life rather than
// what it is.
func lifeHeader(k string) bool {
	return k == "x-death" || k == "x-delivery-count" || strings.HasPrefix(k, "x-sluice-") ||
		strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

func hashString(h hash.Hash, s string) {
	hashInt(h, int64(len(s)))
	h.Write([]byte(s))
}

func hashInt(h hash.Hash, n int64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

// hashValue hashes a header value with its type, so that 1 and "1"
// differ.
func hashValue(h hash.Hash, v any) {
	switch x := v.(type) {
	case amqp.Table:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		hashString(h, "table")
		hashInt(h, int64(len(keys)))
		for _, k := range keys {
			hashString(h, k)
			hashValue(h, x[k])
		}
	case []any:
		hashString(h, "array")
		hashInt(h, int64(len(x)))
		for _, e := range x {
			hashValue(h, e)
		}
	case []byte:
		hashString(h, "bytes")
		hashString(h, string(x))
	case float64:
		hashString(h, "float")
		hashInt(h, int64(math.Float64bits(x)))
	case float32:
		hashString(h, "float")
		hashInt(h, int64(math.Float64bits(float64(x))))
	case time.Time:
		hashString(h, "time")
		hashInt(h, x.Unix())
	default:
		hashString(h, fmt.Sprintf("%T", v))
		hashString(h, fmt.Sprint(v))
	}
}
