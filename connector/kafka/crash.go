package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/resilience"
)

// ErrCrashed is matched by the error in the dead-letter envelope of a
// record that the source stopped delivering because its crash ledger
// found that it ends the consumer's process (see SourceConfig.CrashLedger).
// That error matches [ErrPoison] too.
var ErrCrashed = errors.New("kafka: the record crashed the consumer")

// DefaultCrashAloneWait is SourceConfig.CrashAloneWait left at zero.
const DefaultCrashAloneWait = 10 * time.Second

// crashError returns the error of a record that crashed the consumer,
// with text as its message.
func crashError(text string) error {
	return &broker.CrashError{Text: text, Crashed: ErrCrashed, Poison: ErrPoison}
}

// crashID names a record in the crash ledger: its topic, partition and
// offset, and its timestamp, so that a topic deleted and created again
// does not inherit the marks of the old one.
func crashID(rec *record) string {
	kr := rec.kr
	return kr.Topic + "/" + strconv.FormatInt(int64(kr.Partition), 10) + "/" + strconv.FormatInt(kr.Offset, 10) +
		"@" + strconv.FormatInt(kr.Timestamp.UnixNano(), 10)
}

// openCrashLedgerLocked opens the source's crash ledger, when it has one
// and it is not open, under s.g.mu. Kafka counts no reads, so the records
// the dead process had fetched and not yet held cost nothing: only those
// it held are suspects.
func (s *Source) openCrashLedgerLocked() error {
	if s.cfg.CrashLedger == "" || s.g.crash.Load() != nil {
		return nil
	}
	l, err := crashledger.Open(s.cfg.CrashLedger, crashledger.Options{Clock: s.cfg.Clock, AloneWait: s.cfg.CrashAloneWait})
	if err != nil {
		return resilience.MarkPermanent(fmt.Errorf("kafka: source of %s for group %s: CrashLedger: %w", s.cfg.Topic, s.cfg.Group, err))
	}
	s.g.crash.Store(l)
	return nil
}

// closeCrashLedger closes the crash ledger: what is held goes back
// unsettled, and is not suspect.
func (s *Source) closeCrashLedger() error {
	s.g.mu.Lock()
	l := s.g.crash.Swap(nil)
	s.g.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Close()
}

// crashTurn is the crash ledger's part just before rec is emitted: a
// culprit of an earlier crash is dead-lettered without running (handled);
// any other record is held in the ledger and waits until it may run (a
// suspect alone, another record when no suspect runs alone, each for at
// most CrashAloneWait). When it cannot (the run ends, the ledger cannot
// write), rec goes back unsettled and the error ends Run.
func (s *Source) crashTurn(ctx context.Context, rec *record) (handled bool, err error) {
	l := s.g.crash.Load()
	if l == nil {
		return false, nil
	}
	e := l.Entry(crashID(rec))
	rec.g.crash = e
	e.Hold()
	if e.Verdict() == crashledger.Culprit {
		// Settled as dead-lettered, its mark is cleared; given back (the
		// sink failed), it stays the culprit.
		return true, s.crashed(ctx, rec)
	}
	if err := e.Turn(ctx); err != nil {
		rec.giveBack()
		return true, err
	}
	return false, nil
}

// endCrash tells the crash ledger how rec ended: settled for good, or
// back unsettled (a suspect then stays one).
func (r *record) endCrash(settled bool) {
	e := r.g.crash
	if e == nil {
		return
	}
	if settled {
		e.Settle()
		return
	}
	e.Release()
}

// crashed writes rec, which the crash ledger names the culprit of a
// crash, to the pipeline's dead-letter sink and settles it, without
// emitting it. An error of the sink (or no answer within copyTimeout)
// ends Run: rec is read again, still the culprit.
func (s *Source) crashed(ctx context.Context, rec *record) error {
	now := s.cfg.Clock.Now()
	msg := rec.emitted()
	why := crashError(fmt.Sprintf("kafka: poison record: record %s crashed the consumer: "+
		"its process ended while the record ran alone, after an earlier crash with it in flight (crash ledger %s)",
		msg.CorrelationID(), s.cfg.CrashLedger))
	sink, env := s.g.letters.Letter(msg, messageType, why, msg.CorrelationID(), now)
	env.FirstFailure = now
	env = rec.g.pastStory().merge(env, msg.Deliveries)
	if sink == nil {
		rec.giveBack()
		return fmt.Errorf("kafka: record %s crashed the consumer and the pipeline has no dead-letter sink", msg.CorrelationID())
	}
	// Stored in its stead as the poison guard's letters are: a revoke
	// waits for it, and a culprit gone meanwhile gets none.
	stored, err := s.storeInstead(ctx, rec, func(ctx context.Context) error { return sink.Write(ctx, env) })
	if !stored {
		if err := s.notStored(rec, err); err != nil {
			return fmt.Errorf("kafka: dead-letter record %s, which crashed the consumer: %w", msg.CorrelationID(), err)
		}
		return nil
	}
	s.g.poisoned.Add(1)
	rec.settleUnemitted()
	return nil
}
