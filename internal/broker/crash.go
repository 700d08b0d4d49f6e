package broker

// A CrashError is the error in the dead-letter envelope of a message that
// a broker source's crash ledger found to end the consumer's process. It
// matches the connector's two sentinels: Crashed (ErrCrashed) and Poison
// (ErrPoison).
type CrashError struct {
	// Text is the whole message, the connector's prefix included.
	Text string
	// Crashed and Poison are the connector's sentinels the error matches.
	Crashed, Poison error
}

// Error returns Text.
func (e *CrashError) Error() string { return e.Text }

// Is reports whether target is Crashed or Poison.
func (e *CrashError) Is(target error) bool {
	return target != nil && (target == e.Crashed || target == e.Poison)
}
