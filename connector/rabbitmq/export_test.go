package rabbitmq

// CrashID is crashID, for the tests.
var CrashID = crashID

// CrashError returns the error of a message that crashed the consumer.
func CrashError(text string) error { return &crashError{text} }
