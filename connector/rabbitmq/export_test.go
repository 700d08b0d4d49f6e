package rabbitmq

// CrashID is crashID, for the tests.
var CrashID = crashID

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
