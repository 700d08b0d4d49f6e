// Package crashledger keeps, on local disk, the ids of the messages a
// broker source has in flight, so that a message that ends its consumer's
// process (os.Exit, an unrecovered panic in a goroutine of the user's, an
// OOM kill) is found and stopped without condemning its neighbours.
//
// A [Ledger] records each message when the source takes it (before it is
// emitted) and clears it when the message is settled. When the process
// dies, the file keeps what was in flight. The next [Open] of the same path
// reads it back: the messages in flight at the crash are suspects. A
// suspect, when it arrives again, runs alone: [Entry.Turn] lets it through
// only once nothing else of the source is running, and holds back every
// other message until it is settled. A suspect that is settled is cleared;
// if the process dies while a suspect runs alone, that suspect is the
// culprit, and its next arrival has the [Culprit] verdict: the source
// dead-letters it without running it.
//
// Running alone is bounded by AloneWait, on the ledger's clock, so that a
// pipeline which holds items until more arrive (a batch without linger, a
// count window, a join waiting for its match) never stalls: a suspect
// waits at most AloneWait for the source to be idle, and past it runs
// beside the others; a suspect that runs alone and is not settled within
// AloneWait stops running alone, and the others go on. Either way the
// ledger records it as not alone: a crash then does not name it the
// culprit, it stays a suspect (and its neighbours too, as at any crash
// with several messages in flight).
//
// Writes are cheap: one write(2) before each message is emitted, which the
// kernel keeps when the process dies, and an fsync at most every
// SyncEvery, which only bounds what a crash of the whole machine loses
// (then nothing was running anyway). Settlements are buffered and go out
// with the next write.
//
// A ledger belongs to one process at a time: Open takes an exclusive lock
// on path+".lock" and fails while another process (or another Ledger of
// this process) holds it.
package crashledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Defaults of the Options left at zero.
const (
	// DefaultSyncEvery bounds the time between two fsyncs of the file.
	DefaultSyncEvery = time.Second
	// DefaultForgetAfter is how long a suspect or a culprit that never
	// arrives again is kept: it may have gone to another consumer, or been
	// settled just before a crash that left its clearing unwritten.
	DefaultForgetAfter = 7 * 24 * time.Hour
	// MaxMarks bounds the suspects and culprits a ledger keeps; past it,
	// the oldest are forgotten.
	MaxMarks = 100_000
	// MaxIDLen is the longest id kept as it is; a longer one is kept as
	// its SHA-256.
	MaxIDLen = 512
	// DefaultAloneWait bounds how long a suspect waits for the source to
	// be idle, and how long it runs alone.
	DefaultAloneWait = 10 * time.Second
)

// ErrLocked is matched by the error of an Open whose path another ledger
// holds.
var ErrLocked = errors.New("crashledger: in use by another process")

// Options configure a [Ledger]. The zero value takes every default.
type Options struct {
	// Clock reads the time for SyncEvery and ForgetAfter; default the real
	// clock.
	Clock clockwork.Clock
	// SyncEvery bounds the time between two fsyncs; default
	// [DefaultSyncEvery]. A negative value syncs at every write.
	SyncEvery time.Duration
	// ForgetAfter is how long an unresolved suspect or culprit is kept;
	// default [DefaultForgetAfter].
	ForgetAfter time.Duration
	// AloneWait bounds how long a suspect waits, in [Entry.Turn], for
	// nothing else to run, and how long it then runs alone; past either,
	// it runs beside the others and is not the culprit of a crash.
	// Default [DefaultAloneWait].
	AloneWait time.Duration
}

// A Verdict is what the ledger knows of a message on its arrival.
type Verdict uint8

const (
	// Clean: the message was not in flight at a crash.
	Clean Verdict = iota
	// Suspect: the message was in flight when a process died; it runs
	// alone.
	Suspect
	// Culprit: the process died while the message ran alone; it must not
	// run again.
	Culprit
)

// String returns "clean", "suspect" or "culprit".
func (v Verdict) String() string {
	switch v {
	case Suspect:
		return "suspect"
	case Culprit:
		return "culprit"
	}
	return "clean"
}

// A mark is what the ledger holds against a message from earlier crashes.
type mark struct {
	culprit bool
	// crashes counts the crashes the message was in flight at; reported
	// how many of them an Entry of this process has told already.
	crashes  int
	reported int
	since    time.Time
}

// A Ledger is the crash ledger of one source. Its methods are safe for
// concurrent use.
type Ledger struct {
	path  string
	clock clockwork.Clock
	opts  Options
	lock  *os.File

	mu   sync.Mutex
	f    *os.File
	size int64 // of the file, as written
	// compactAt is the size past which the file is written anew with only
	// what still holds (the marks, and what is in flight), so that it
	// stays small however many messages go through.
	compactAt int64
	buf       []byte
	err       error // the first write error; every later Hold returns it
	closed    bool
	lastSync  time.Time
	marks     map[string]*mark
	inflight  map[string]int
	running   int
	waiting   int // in Turn or WaitAlone
	alone     *Entry
	// changed is closed, and replaced, whenever running or alone changes:
	// what Turn waits on.
	changed chan struct{}
	found   Found
}

// Found is what Open found in the file of an earlier process.
type Found struct {
	// Suspects and Culprits are the unresolved marks after reading it.
	Suspects, Culprits int
	// Crashed says the earlier process ended with messages in flight.
	Crashed bool
	// Torn says the file's last line was cut short, as a crash mid-write
	// leaves it; the line was ignored.
	Torn bool
	// InFlight are the ids in flight at the crash, sorted.
	InFlight []string
}

// Found returns what Open found in the file.
func (l *Ledger) Found() Found {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.found
}

// Open locks path, reads what an earlier process left in it, and starts a
// new ledger there: the messages the file shows in flight become suspects,
// and a suspect the file shows running alone becomes a culprit. A missing
// or empty file is a fresh ledger. A torn last line is ignored; a file that
// is not a crash ledger, or that has a damaged line before its last, is an
// error naming the path and the line, and is left as it is.
func Open(path string, opts Options) (*Ledger, error) {
	if path == "" {
		return nil, errors.New("crashledger: empty path")
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.SyncEvery == 0 {
		opts.SyncEvery = DefaultSyncEvery
	}
	if opts.ForgetAfter <= 0 {
		opts.ForgetAfter = DefaultForgetAfter
	}
	if opts.AloneWait <= 0 {
		opts.AloneWait = DefaultAloneWait
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, err
	}
	l := &Ledger{path: path, clock: opts.Clock, opts: opts, lock: lock,
		inflight: map[string]int{}, changed: make(chan struct{}), compactAt: defaultCompactAt}
	if err := l.recover(); err != nil {
		_ = unlockFile(lock)
		return nil, err
	}
	return l, nil
}

// recover reads the file, turns what was in flight into marks, and writes
// the marks to a new file that replaces it.
func (l *Ledger) recover() error {
	st, err := readFile(l.path)
	if err != nil {
		return err
	}
	now := l.clock.Now()
	var inFlight []string
	for id, n := range st.inflight {
		if n <= 0 {
			continue
		}
		inFlight = append(inFlight, id)
		m := st.marks[id]
		if m == nil {
			m = &mark{since: now}
			st.marks[id] = m
		}
		if st.alone[id] {
			m.culprit = true
		} else {
			m.crashes += n
		}
		m.since = now
	}
	l.marks = st.marks
	l.forgetOld(now)
	slices.Sort(inFlight)
	l.found = Found{Crashed: st.crashed(), Torn: st.torn, InFlight: inFlight}
	for _, m := range l.marks {
		if m.culprit {
			l.found.Culprits++
		} else {
			l.found.Suspects++
		}
	}
	f, err := l.rewrite()
	if err != nil {
		return err
	}
	l.f, l.lastSync = f, now
	return nil
}

// forgetOld drops the marks older than ForgetAfter, then the oldest past
// MaxMarks.
func (l *Ledger) forgetOld(now time.Time) {
	for id, m := range l.marks {
		if now.Sub(m.since) > l.opts.ForgetAfter {
			delete(l.marks, id)
		}
	}
	if over := len(l.marks) - MaxMarks; over > 0 {
		type aged struct {
			id    string
			since int64
		}
		all := make([]aged, 0, len(l.marks))
		for id, m := range l.marks {
			all = append(all, aged{id, m.since.UnixNano()})
		}
		slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.since, b.since) })
		for _, a := range all[:over] {
			delete(l.marks, a.id)
		}
	}
}

// Entry returns the entry of a message with id, just arrived, and the
// ledger's verdict on it. Nothing is written until [Entry.Hold] or
// [Entry.Turn].
func (l *Ledger) Entry(id string) *Entry {
	id = keyOf(id)
	e := &Entry{l: l, id: id}
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.marks[id]; m != nil {
		e.verdict = Suspect
		if m.culprit {
			e.verdict = Culprit
		}
		e.crashes = m.crashes - m.reported
		m.reported = m.crashes
	}
	return e
}

// keyOf returns id as the ledger keeps it: itself, or the hex of its
// SHA-256 when it is longer than MaxIDLen.
func keyOf(id string) string {
	if len(id) <= MaxIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Close writes what is buffered, forgets what is in flight (the process
// ends cleanly: the broker gets those messages back, and they are not
// suspects), keeps the marks, syncs and unlocks the file. Entries of a
// closed ledger do nothing.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.err
	clear(l.inflight)
	if l.alone != nil {
		l.alone.stopTimer()
	}
	l.alone = nil
	l.buf = l.buf[:0]
	if err == nil {
		var f *os.File
		// The marks alone, in a new file: in-flight messages are cleared.
		f, err = l.rewrite()
		if f != nil {
			err = errors.Join(err, f.Close())
		}
	}
	err = errors.Join(err, l.f.Close(), unlockFile(l.lock))
	l.wake()
	return err
}

// wake tells every Turn waiting that running or alone changed.
func (l *Ledger) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// addLocked appends a record to the buffer.
func (l *Ledger) addLocked(op byte, id string) {
	l.buf = appendRecord(l.buf, op, id)
}

// flushLocked writes the buffer to the file with one write(2), and syncs
// when SyncEvery has passed since the last sync.
func (l *Ledger) flushLocked() error {
	if l.err != nil {
		return l.err
	}
	if len(l.buf) == 0 {
		return nil
	}
	if _, err := l.f.Write(l.buf); err != nil {
		l.err = fmt.Errorf("crashledger: write %s: %w", l.path, err)
		return l.err
	}
	l.size += int64(len(l.buf))
	l.buf = l.buf[:0]
	now := l.clock.Now()
	if l.size > l.compactAt {
		// The file only grows: start a new one with what holds now.
		f, err := l.rewrite()
		if err != nil {
			l.err = err
			return err
		}
		_ = l.f.Close()
		l.f, l.lastSync = f, now
		return nil
	}
	if l.opts.SyncEvery < 0 || now.Sub(l.lastSync) >= l.opts.SyncEvery {
		if err := l.f.Sync(); err != nil {
			l.err = fmt.Errorf("crashledger: sync %s: %w", l.path, err)
			return l.err
		}
		l.lastSync = now
	}
	return nil
}

// maxBuffered bounds the settlements buffered between two writes.
const maxBuffered = 64 << 10

// defaultCompactAt is a ledger's compactAt.
const defaultCompactAt = 4 << 20

// Suspects returns how many suspects of earlier crashes are not resolved
// yet: neither settled nor forgotten (a suspect released stays one).
func (l *Ledger) Suspects() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.marks {
		if !m.culprit {
			n++
		}
	}
	return n
}

// Waiting returns how many wait now, in [Entry.Turn] or in
// [Ledger.WaitAlone].
func (l *Ledger) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// WaitAlone waits until no suspect runs alone, and returns ctx's cause
// when ctx is done first. A source that must not take more messages from
// its broker while a suspect runs alone (each delivery counts) calls it
// before it asks for more.
func (l *Ledger) WaitAlone(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.alone != nil && !l.closed {
		ch := l.changed
		l.waiting++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			l.mu.Lock()
			l.waiting--
			return context.Cause(ctx)
		case <-ch:
		}
		l.mu.Lock()
		l.waiting--
	}
	return nil
}

// Suspect makes a suspect of the message with id, as if it had been in
// flight at the last crash: for a message that the broker delivered to the
// dead process and that the ledger could not record (it was on its way
// when the process died). The mark is written at once.
func (l *Ledger) Suspect(id string) error {
	id = keyOf(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	m := l.marks[id]
	if m == nil {
		m = &mark{}
		l.marks[id] = m
	}
	if m.culprit {
		return nil
	}
	m.crashes++
	m.since = l.clock.Now()
	l.buf = appendMark(l.buf, id, m)
	return l.flushLocked()
}

// Flush writes what is buffered (the records of Hold, Settle and Release)
// now, and returns the ledger's write error, if any.
func (l *Ledger) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	return l.flushLocked()
}
