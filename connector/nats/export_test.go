package nats

// CrashError returns the error of a message that crashed the consumer.
func CrashError(text string) error { return crashError(text) }

// CrashWaiting returns how many messages wait for their turn in the
// source's crash ledger (0 without one).
func CrashWaiting(s *Source) int {
	s.mu.Lock()
	l := s.crash
	s.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.Waiting()
}

// GateAcker makes the acker of every session s opens send its settlements
// only once gate is closed, and calls roomWait whenever Run waits for room.
// Call it before the pipeline runs.
func GateAcker(s *Source, gate <-chan struct{}, roomWait func(held, unsent int)) {
	s.ackerGate, s.roomWait = gate, roomWait
}
