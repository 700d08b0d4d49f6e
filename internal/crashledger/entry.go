package crashledger

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// An Entry is one delivery of a message, from its arrival to its
// settlement.
type Entry struct {
	l       *Ledger
	id      string
	verdict Verdict
	crashes int
	held    bool
	running bool
	done    bool
	// alone says the suspect got its turn alone; shared, that it runs
	// beside others (it got its turn past AloneWait, or ran alone for
	// AloneWait). timer ends its time alone.
	alone, shared bool
	timer         clockwork.Timer
}

// Verdict returns the ledger's verdict on the message at its arrival.
func (e *Entry) Verdict() Verdict { return e.verdict }

// Crashes returns how many crashes of earlier processes the message was in
// flight at that no earlier Entry of this ledger reported: deliveries that
// a broker counts and that were not the message's fault (unless it is the
// culprit).
func (e *Entry) Crashes() int { return e.crashes }

// ID returns the message's id as the ledger keeps it.
func (e *Entry) ID() string { return e.id }

// Hold records the message in flight as it arrives, before it waits for
// its turn: the record goes out with the next write, which Turn makes
// before any message is emitted, so that a crash a message causes finds
// every message held before it. Turn holds the entry too when Hold was not
// called.
func (e *Entry) Hold() {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || e.held || e.done {
		return
	}
	e.held = true
	l.inflight[e.id]++
	l.addLocked(opHold, e.id)
	if len(l.buf) >= maxBuffered {
		_ = l.flushLocked()
	}
}

// Turn waits for the message's turn to run, holds it if it is not held,
// and counts it running. A suspect's turn comes once nothing else is
// running; it is then recorded as running alone, and no other turn comes
// until it is settled or released. Any other message's turn comes when no
// suspect runs alone. Turn returns ctx's cause when ctx is done first, and
// the message is then not running. Every record buffered is written before
// Turn returns, so that the file is current when the message is emitted.
//
// Both waits are bounded by the ledger's AloneWait, so that a pipeline
// that holds what it has until more arrives cannot stall: a suspect whose
// turn has not come within AloneWait gets it as soon as no suspect runs
// alone, and runs beside the others; a suspect that runs alone for
// AloneWait without being settled stops running alone, and the turns
// waiting for it come. Either is written to the file before any other
// message runs: a crash from then on finds the suspect in flight, not
// alone, so it stays a suspect and is not named the culprit.
func (e *Entry) Turn(ctx context.Context) error {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	var expired <-chan time.Time
	for {
		if l.closed || e.done {
			return nil
		}
		if l.alone == nil && (e.verdict != Suspect || e.shared || l.running == 0) {
			break
		}
		if e.verdict == Suspect && !e.shared && expired == nil {
			t := l.clock.NewTimer(l.opts.AloneWait)
			defer t.Stop()
			expired = t.Chan()
		}
		ch := l.changed
		l.waiting++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			l.mu.Lock()
			l.waiting--
			return context.Cause(ctx)
		case <-ch:
		case <-expired:
			e.shared = true
		}
		l.mu.Lock()
		l.waiting--
	}
	if !e.held {
		e.held = true
		l.inflight[e.id]++
		l.addLocked(opHold, e.id)
	}
	if e.verdict == Suspect && !e.shared {
		l.alone = e
		l.addLocked(opAlone, e.id)
	}
	if err := l.flushLocked(); err != nil {
		if l.alone == e {
			l.alone = nil
		}
		return err
	}
	if l.alone == e {
		e.alone = true
		e.timer = l.clock.AfterFunc(l.opts.AloneWait, e.share)
	}
	e.running = true
	l.running++
	return nil
}

// share ends the suspect's time alone, when it ran alone for AloneWait
// without being settled: the record goes out at once, before any other
// message runs, and the turns waiting for it come.
func (e *Entry) share() {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.alone != e {
		return
	}
	l.alone = nil
	e.shared = true
	l.addLocked(opShared, e.id)
	_ = l.flushLocked()
	l.wake()
}

// stopTimer stops the timer of the suspect's time alone; l.mu is held.
func (e *Entry) stopTimer() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// Alone reports whether the message is a suspect that got its turn alone
// and has not shared it since (see [Entry.Turn]).
func (e *Entry) Alone() bool {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	return e.alone && !e.shared
}

// Settle says the message is done for good (acked, or dead-lettered): it
// is no longer in flight, and a mark against it is cleared. Settle and
// Release are idempotent, and only the first of them counts. They do not
// wait for the disk: their record is buffered, and written with the next
// Turn (at once for a suspect that ran alone). A crash before that write
// makes a suspect of a message that is already settled, which costs little:
// it never arrives again, and its mark is forgotten after ForgetAfter.
func (e *Entry) Settle() { e.end(opSettle) }

// Release says the message went back to the broker without an outcome
// (the run ended first): it is no longer in flight, and a mark against it
// stays.
func (e *Entry) Release() { e.end(opRelease) }

func (e *Entry) end(op byte) {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.done {
		return
	}
	e.done = true
	if l.closed {
		return
	}
	if op == opSettle {
		delete(l.marks, e.id)
	}
	if !e.held && op == opRelease {
		return
	}
	if e.held {
		if l.inflight[e.id]--; l.inflight[e.id] <= 0 {
			delete(l.inflight, e.id)
		}
	}
	l.addLocked(op, e.id)
	changed := false
	if e.running {
		l.running--
		changed = true
	}
	switch {
	case l.alone == e:
		l.alone = nil
		e.stopTimer()
		// At once: a crash from now on must not find it running alone.
		_ = l.flushLocked()
	case len(l.buf) >= maxBuffered:
		_ = l.flushLocked()
	}
	if changed {
		l.wake()
	}
}
