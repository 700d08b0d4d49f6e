// Package broker holds what the broker connectors (connector/rabbitmq,
// connector/nats) share: the decision of their dead-letter sinks between
// the broker's own retry and the next sink ([RetrySink]), and the finding
// of a source's deliveries behind an envelope ([Deliveries]).
//
// It imports only the standard library and the core packages of the
// module, so that each connector, in its own Go module, can use it: Go's
// rule for internal packages goes by import path, not by module.
package broker
