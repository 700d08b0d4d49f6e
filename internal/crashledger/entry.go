package crashledger

import "context"

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
func (e *Entry) Turn(ctx context.Context) error {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.closed || e.done {
			return nil
		}
		if l.alone == nil && (e.verdict != Suspect || l.running == 0) {
			break
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			l.mu.Lock()
			return context.Cause(ctx)
		case <-ch:
		}
		l.mu.Lock()
	}
	if !e.held {
		e.held = true
		l.inflight[e.id]++
		l.addLocked(opHold, e.id)
	}
	if e.verdict == Suspect {
		l.alone = e
		l.addLocked(opAlone, e.id)
	}
	if err := l.flushLocked(); err != nil {
		if l.alone == e {
			l.alone = nil
		}
		return err
	}
	e.running = true
	l.running++
	return nil
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
		// At once: a crash from now on must not find it running alone.
		_ = l.flushLocked()
	case len(l.buf) >= maxBuffered:
		_ = l.flushLocked()
	}
	if changed {
		l.wake()
	}
}
