package rabbitmq

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// ErrInvalidConfig is matched by every [*ConfigError] with [errors.Is].
var ErrInvalidConfig = errors.New("rabbitmq: invalid config")

// A ConfigError reports one invalid setting of a connector's config. Field
// is the path of the setting, such as "Retry.Delay".
type ConfigError struct {
	// Field is the path of the setting, such as "Retry.Delay".
	Field string
	// Value is the refused value, or a stand-in such as "(hidden)" for a
	// URL that may hold a password.
	Value any
	// Reason says why the value is refused.
	Reason string
}

// Error names the field, its value and why it is refused.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("rabbitmq: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// ErrConnectionLost is matched by the error of a source or publisher whose
// connection or channel went away. Such an error is transient: reconnecting
// can fix it.
var ErrConnectionLost = errors.New("rabbitmq: connection lost")

// ErrConsumerCancelled is matched by the error of a source whose consumer
// the broker cancelled while the channel stayed open, as it does when the
// queue is deleted. It is transient: node restart consumes again (and
// declares the queue again when the source declares it).
var ErrConsumerCancelled = errors.New("rabbitmq: consumer cancelled by the broker")

// ErrNotOpen is returned by Run when the source was not opened; the
// pipeline calls Open before Run.
var ErrNotOpen = errors.New("rabbitmq: not open")

// ErrNacked and ErrConfirmTimeout are matched by a [*ConfirmError] whose
// publish the broker refused (a basic.nack), or did not confirm within
// [Confirms.Timeout].
var (
	// ErrNacked is matched by a publish the broker nacked.
	ErrNacked = errors.New("rabbitmq: publish nacked by the broker")
	// ErrConfirmTimeout is matched by a publish whose confirm did not come
	// within the timeout.
	ErrConfirmTimeout = errors.New("rabbitmq: publish not confirmed in time")
)

// A ConfirmError is a publish that the broker did not confirm: it answered
// with a nack, or not within the timeout. It reaches the pipeline marked
// transient and blameless (not the message's fault), for item retry: a
// nack means the broker could not take the
// message now (a full queue with x-overflow=reject-publish, an internal
// error), and a late confirm may still come, so a retry can publish the
// message twice.
type ConfirmError struct {
	// Exchange is the publish's exchange; "" is the default exchange.
	Exchange string
	// RoutingKey is the publish's routing key.
	RoutingKey string
	// Timeout is the wait that ran out; 0 for a nack.
	Timeout time.Duration
}

// Error says what happened to which publish.
func (e *ConfirmError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("rabbitmq: publish to exchange %q with key %q not confirmed within %s", e.Exchange, e.RoutingKey, e.Timeout)
	}
	return fmt.Sprintf("rabbitmq: publish to exchange %q with key %q nacked by the broker", e.Exchange, e.RoutingKey)
}

// Is reports whether target is [ErrConfirmTimeout] for a timeout, or
// [ErrNacked] for a nack. A timeout's outcome is unknown: it also matches
// [ErrOutcomeUnknown] and idempotency.ErrUnknownOutcome.
func (e *ConfirmError) Is(target error) bool {
	if e.Timeout > 0 {
		return target == ErrConfirmTimeout || target == ErrOutcomeUnknown || target == idempotency.ErrUnknownOutcome
	}
	return target == ErrNacked
}

// ErrOutcomeUnknown is matched by the error of a publish that may have
// reached the broker, or not: its confirm did not come in time, or its
// channel or connection closed before it came, or the publisher closed
// before a retry. Counting such a publish as failed is not safe: a retry
// may publish the message twice. It also matches
// idempotency.ErrUnknownOutcome, so that an idempotency guard around the
// publisher keeps the item's claim.
var ErrOutcomeUnknown = errors.New("rabbitmq: publish outcome unknown")

// unknownError is a publish error whose outcome is unknown.
type unknownError struct{ err error }

func (e *unknownError) Error() string {
	return e.err.Error() + " (outcome unknown: the broker may have taken the message)"
}

func (e *unknownError) Unwrap() error { return e.err }

func (e *unknownError) Is(target error) bool {
	return target == ErrOutcomeUnknown || target == idempotency.ErrUnknownOutcome
}

// outcomeUnknown marks err as a publish whose outcome is unknown.
func outcomeUnknown(err error) error { return &unknownError{err} }

// blameless marks err transient and not the message's fault: the broker
// was away, refused it for its own state (a full queue), or did not say
// in time.
func blameless(err error) error { return resilience.MarkBlameless(resilience.MarkTransient(err)) }

// ErrReturned is matched by every [*ReturnError].
var ErrReturned = errors.New("rabbitmq: mandatory publish returned")

// A ReturnError is a mandatory publish that the broker returned because no
// queue was bound to take it. It is permanent: publishing again to the same
// exchange and key is returned again until someone changes the bindings.
type ReturnError struct {
	// Exchange is the publish's exchange; "" is the default exchange.
	Exchange string
	// RoutingKey is the publish's routing key.
	RoutingKey string
	// ReplyCode is the broker's reply code, such as 312.
	ReplyCode uint16
	// ReplyText is the broker's reason, such as NO_ROUTE.
	ReplyText string
}

// Error names the exchange, the key and the broker's reason.
func (e *ReturnError) Error() string {
	return fmt.Sprintf("rabbitmq: publish to exchange %q with key %q returned: %d %s", e.Exchange, e.RoutingKey, e.ReplyCode, e.ReplyText)
}

// Is reports whether target is [ErrReturned].
func (e *ReturnError) Is(target error) bool { return target == ErrReturned }

// connectionLost reports whether err says that the connection or channel
// went away or could not be reached, as opposed to the broker refusing an
// operation (an unknown exchange, a precondition, access), which closes a
// channel too but happens again on a new one.
func connectionLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, amqp.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.ConnectionForced, amqp.FrameError, amqp.ChannelError, amqp.ResourceError, amqp.InternalError:
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// classify marks err for the pipeline's classifiers: a lost connection is
// transient (reconnecting fixes it), a refusal by the broker is permanent
// (it is refused again). Other errors keep their own nature.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if connectionLost(err) {
		return resilience.MarkTransient(err)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return resilience.MarkPermanent(err)
	}
	return err
}
