package crashledger

import "errors"

// Abandon ends l as a process that dies does: the file keeps what it
// says, and the lock goes, with nothing written.
func Abandon(l *Ledger) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return errors.Join(l.f.Close(), unlockFile(l.lock))
}

// BreakFile closes l's file under it, so that its next write fails.
func BreakFile(l *Ledger) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// SetCompactAt sets the size past which l writes its file anew.
func SetCompactAt(l *Ledger, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.compactAt = n
}
