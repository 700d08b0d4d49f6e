package rabbitmq

// CrashID is crashID, for the tests.
var CrashID = crashID
