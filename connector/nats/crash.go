package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/crashledger"
	"github.com/sluicehq/sluice/resilience"
)

// ErrCrashed is matched by the error in the dead-letter envelope of a
// message that the source stopped delivering because its crash ledger
// found that it ends the consumer's process (see SourceConfig.CrashLedger).
// That error matches [ErrPoison] too.
var ErrCrashed = errors.New("nats: the message crashed the consumer")

// crashError returns the error of a message that crashed the consumer,
// with text as its message.
func crashError(text string) error {
	return &broker.CrashError{Text: text, Crashed: ErrCrashed, Poison: ErrPoison}
}

// openCrashLedger opens the source's crash ledger, when it has one and it
// is not open yet, after Open found the consumer cons.
func (s *Source) openCrashLedger(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer) error {
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
		return resilience.MarkPermanent(fmt.Errorf("nats: source of %s/%s: CrashLedger: %w", s.cfg.Stream, s.cfg.Consumer, err))
	}
	if f := l.Found(); f.Crashed {
		if err := s.suspectUnheld(ctx, js, l, f.InFlight, cons.CachedInfo().Delivered.Stream); err != nil {
			_ = l.Close()
			return err
		}
	}
	s.crash, s.crashOpened = l, s.cfg.Clock.Now()
	return nil
}

// suspectUnheld makes suspects of the messages the server delivered to the
// dead process after the last one the ledger holds, up to delivered (the
// consumer's last delivered stream sequence), at most Batch of them: they
// were on their way when it died, and the server counted their delivery.
// Their ids need their timestamps, which the stream tells.
func (s *Source) suspectUnheld(ctx context.Context, js jetstream.JetStream, l *crashledger.Ledger, inFlight []string, delivered uint64) error {
	var high uint64
	for _, id := range inFlight {
		rest, ok := strings.CutPrefix(id, s.cfg.Stream+"/")
		if !ok {
			continue
		}
		seq, _, _ := strings.Cut(rest, "@")
		if n, err := strconv.ParseUint(seq, 10, 64); err == nil {
			high = max(high, n)
		}
	}
	if high == 0 || delivered <= high {
		return nil
	}
	from := high + 1
	if delivered-high > uint64(s.cfg.Batch) {
		from = delivered - uint64(s.cfg.Batch) + 1
	}
	st, err := js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return classify(fmt.Errorf("nats: stream %q: %w", s.cfg.Stream, err))
	}
	for seq := from; seq <= delivered; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // gone: it will not come back
		}
		if err != nil {
			return classify(fmt.Errorf("nats: stream %q: message %d: %w", s.cfg.Stream, seq, err))
		}
		if err := l.Suspect(crashID(s.cfg.Stream, seq, m.Time)); err != nil {
			return err
		}
	}
	return nil
}

// crashID names a message in the crash ledger: its stream sequence, and
// the time it was stored, so that a stream deleted and created again does
// not inherit the marks of the old one.
func crashID(stream string, seq uint64, stored time.Time) string {
	return stream + "/" + strconv.FormatUint(seq, 10) + "@" + strconv.FormatInt(stored.UnixNano(), 10)
}

// crashPause waits, before a pull, while a suspect runs alone: every
// message the server delivers counts a delivery, and one delivered while a
// suspect crashes the process, even if the source never held it, would
// count one that was not the message's fault.
func (s *Source) crashPause(ctx context.Context) error {
	if s.cfg.CrashLedger == "" {
		return nil
	}
	s.mu.Lock()
	l := s.crash
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.WaitAlone(ctx)
}

// crashRoom returns the size of the next pull: room, or 1 while suspects
// of a crash may still come back (for twice the longest wait before the
// server delivers again what a dead process held), so that a suspect
// comes alone in its pull and nothing else is on its way while it runs.
func (s *Source) crashRoom(room int) int {
	if s.cfg.CrashLedger == "" {
		return room
	}
	s.mu.Lock()
	l, since := s.crash, s.crashOpened
	s.mu.Unlock()
	if l == nil || room <= 1 {
		return room
	}
	wait := max(s.cfg.AckWait, slices.Max(append([]time.Duration{0}, s.cfg.BackOff...)))
	if s.cfg.Clock.Since(since) < 2*wait && l.Suspects() > 0 {
		return 1
	}
	return room
}

// closeCrashLedger closes the crash ledger: what is held goes back to the
// server (nak'd by the session's close, or after AckWait), and is not
// suspect.
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

// holdCrash records d in the crash ledger as it arrives, before it waits
// behind others: the server counts its delivery from now on, and a crash
// before it is settled must be known not to be its fault (unless it runs
// alone). The record goes out with the next message's turn, before that
// message is emitted.
func (s *Source) holdCrash(d *delivery) {
	if s.cfg.CrashLedger == "" {
		return
	}
	s.mu.Lock()
	l := s.crash
	s.mu.Unlock()
	if l == nil {
		return
	}
	d.crash = l.Entry(crashID(d.stream, d.streamSeq, d.stamp))
	d.crash.Hold()
}

// crashCheck is the crash ledger's part before the poison guard: it
// dead-letters a culprit (handled). The deliveries that crashes of earlier
// processes cost a message need no sparing: the poison guard counts only
// the runs the message failed, which its copies carry.
func (s *Source) crashCheck(ctx context.Context, d *delivery, msg Message) (handled bool, err error) {
	if d.crash == nil {
		return false, nil
	}
	if d.crash.Verdict() == crashledger.Culprit {
		return true, s.crashed(ctx, d, msg)
	}
	return false, nil
}

// crashTurn waits, just before d is emitted, until it may run: a suspect
// alone, any other message when no suspect runs alone, each for at most
// CrashAloneWait (see crashledger.Entry.Turn). When it cannot (the
// run ends, the ledger cannot write), d goes back to the server.
func (s *Source) crashTurn(ctx context.Context, d *delivery) error {
	if d.crash == nil {
		return nil
	}
	if err := d.crash.Turn(ctx); err != nil {
		d.giveBack()
		return err
	}
	return nil
}

// endCrash tells the crash ledger how d ended: for good (acked,
// terminated), or back with the server (a suspect then stays one).
func (d *delivery) endCrash(how settlement) {
	if d.crash == nil {
		return
	}
	if how == ack || how == term {
		d.crash.Settle()
		return
	}
	d.crash.Release()
}

// crashed writes the message of d, which the crash ledger names the
// culprit of a crash, to the pipeline's dead-letter sink and terminates
// it. An error of the sink ends Run: the message is nak'd and comes back,
// still the culprit.
func (s *Source) crashed(ctx context.Context, d *delivery, msg Message) error {
	now := s.cfg.Clock.Now()
	why := crashError(fmt.Sprintf("nats: poison message: message %s of stream %q crashed the consumer: "+
		"its process ended while the message ran alone, after an earlier crash with it in flight (crash ledger %s)",
		describeMsg(msg), s.cfg.Stream, s.cfg.CrashLedger))
	sink, env := s.letters.Letter(msg, messageType, why, d.id, now)
	env.FirstFailure = now
	env = d.merge(env)
	d.settled.Store(true)
	if err := sink.Write(ctx, env); err != nil {
		d.sess.settle(settle{d: d, how: nak})
		return fmt.Errorf("nats: dead-letter message %s, which crashed the consumer: %w", d.id, err)
	}
	s.poisoned.Add(1)
	d.sess.settle(settle{d: d, how: term})
	return nil
}
